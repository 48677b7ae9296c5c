// Command printenv is the e2e node's stand-in for a TPU workload: it prints its hostname and
// its environment, sorted, one "NAME=value" per line, and exits 0. With arguments, it then
// sleeps that many seconds (a Pod that stays Running).
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"
)

func main() {
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "?"
	}
	fmt.Printf("hostname=%s\n", hostname)
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		fmt.Println(kv)
	}
	if len(os.Args) > 1 {
		seconds, err := strconv.Atoi(os.Args[1])
		if err == nil {
			time.Sleep(time.Duration(seconds) * time.Second)
		}
	}
}
