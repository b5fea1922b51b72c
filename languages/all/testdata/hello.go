package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

func main() {
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	arg := "?"
	if len(os.Args) > 1 {
		arg = os.Args[1]
	}
	fmt.Printf("%s %s from %s\n", os.Getenv("GREETING"), strings.TrimSpace(line), arg)
	fmt.Fprintln(os.Stderr, "bye")
	os.Exit(3)
}
