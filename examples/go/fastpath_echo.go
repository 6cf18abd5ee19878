// An echo server and client that opt one socket each into loopfast's fast
// path with the socket option, as the seed's SIO_LOOPBACK_FAST_PATH is set
// per socket: the standard library only, no cgo.
//
//	CGO_ENABLED=0 go build fastpath_echo.go
//	loopfast run --per-socket -- ./fastpath_echo server
//	loopfast run --per-socket -- ./fastpath_echo client PORT < lines
//
// Go makes its system calls itself, past the preload: `loopfast run`
// supervises it (seccomp), which answers the option. The listener is
// opted in before it listens and the client before it connects, in the
// Control hook that net.ListenConfig and net.Dialer call between socket()
// and bind/connect. Without loopfast the kernel refuses the option
// (ENOPROTOOPT) and both carry on over plain TCP. The server prints
// "listening on PORT" and, per connection, "accepted: fast path" (or
// "plain TCP"); the client prints "connected: ..." and echoes each line
// of stdin as "echo: LINE".
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

const (
	solLoopfast      = 0x4c46 // SOL_LOOPFAST in <loopfast.h>
	loopfastFastPath = 1      // LOOPFAST_FAST_PATH
)

// optIn is a Control hook: sets the option on the new socket and says so
// when it is refused (then the socket is plain TCP, which works too).
func optIn(network, address string, c syscall.RawConn) error {
	var err error
	c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), solLoopfast, loopfastFastPath, 1)
	})
	if err != nil {
		fmt.Printf("option refused (%v): plain TCP\n", err)
	}
	return nil
}

// path asks the option back: on a connected socket, whether it is on the
// fast path.
func path(conn net.Conn) string {
	raw, err := conn.(*net.TCPConn).SyscallConn()
	on := 0
	if err == nil {
		raw.Control(func(fd uintptr) {
			if v, e := syscall.GetsockoptInt(int(fd), solLoopfast, loopfastFastPath); e == nil {
				on = v
			}
		})
	}
	if on == 1 {
		return "fast path"
	}
	return "plain TCP"
}

func server() {
	lc := net.ListenConfig{Control: optIn}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("listening on", l.Addr().(*net.TCPAddr).Port)
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Println("accept:", err)
			os.Exit(1)
		}
		fmt.Println("accepted:", path(c))
		go func() {
			io.Copy(c, c)
			c.Close()
		}()
	}
}

func client(port string) {
	d := net.Dialer{Control: optIn}
	c, err := d.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Println("connect:", err)
		os.Exit(1)
	}
	fmt.Println("connected:", path(c))
	in, back := bufio.NewScanner(os.Stdin), bufio.NewReader(c)
	for in.Scan() {
		fmt.Fprintln(c, in.Text())
		line, err := back.ReadString('\n')
		if err != nil {
			os.Exit(1)
		}
		fmt.Print("echo: ", line)
	}
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "server":
		server()
	case len(os.Args) == 3 && os.Args[1] == "client":
		client(os.Args[2])
	default:
		fmt.Fprintln(os.Stderr, "usage: fastpath_echo server | client PORT")
		os.Exit(2)
	}
}
