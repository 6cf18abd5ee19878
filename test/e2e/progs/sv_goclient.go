// A Go client for test_supervisor.py, built with CGO_ENABLED=0 (a static
// binary: Go's own socket calls, no libc): dials 127.0.0.1:PORT, prints
// "names LOCAL PEER" (net.Conn's addresses, from getsockname and
// getpeername), writes N bytes and reads them back, prints "echo OK N" or
// "echo BAD N", then with "wait" prints "waiting" and blocks until a
// signal ends it (Go's default: SIGTERM kills it).
package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[2])
	c, err := net.Dial("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Println("connect", err)
		os.Exit(1)
	}
	fmt.Println("names", c.LocalAddr(), c.RemoteAddr())
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i*7 + 3)
	}
	go c.Write(out)
	in := make([]byte, n)
	got, _ := io.ReadFull(c, in)
	if got == n && bytes.Equal(in, out) {
		fmt.Println("echo OK", got)
	} else {
		fmt.Println("echo BAD", got)
	}
	if len(os.Args) > 3 && os.Args[3] == "wait" {
		fmt.Println("waiting")
		time.Sleep(time.Hour)
	}
}
