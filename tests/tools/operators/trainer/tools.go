//go:build tools

// Package tools pins the trainer manager that ../build.sh compiles. It is never built
// itself; the blank import keeps the module in go.mod/go.sum.
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
