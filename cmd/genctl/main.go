// Command genctl is the command-line client of gend's REST API.
// See docs/genctl.md.
package main

import (
	"os"

	"github.com/gend-dev/gend/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr, os.Getenv)) }
