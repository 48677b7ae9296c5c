//go:build tools

// Package tools pins the jobset manager that ../build.sh compiles. It is never built
// itself; the blank import keeps the module in go.mod/go.sum.
package tools

import _ "sigs.k8s.io/jobset"
