// Go programs for test_supervisor.py, built with CGO_ENABLED=0 (a static
// binary: Go's own socket calls, no libc), standard library only.
//
//	echo-server          listens on 127.0.0.1:0, prints "listening PORT",
//	                     echoes every connection; with "log", prints
//	                     "accepted LOCAL REMOTE" for each (net.Conn's
//	                     addresses); with "relisten", serves one
//	                     connection, closes the listener, listens again on
//	                     its port and says "relisten ok" (or the error).
//	http-server          net/http on 127.0.0.1:0, prints "listening PORT";
//	                     GET /NAME answers "hello NAME from go\n"; GET
//	                     /held/NAME prints "held NAME" and answers once a
//	                     line arrives on stdin.
//	echo-client PORT N   dials, writes N bytes, reads them back, prints
//	                     "names LOCAL PEER" and "echo OK N" (or BAD), and
//	                     with "wait" prints "waiting" and sleeps.
//	http-client PORT NAME  GET /NAME, prints the status and the body.
//	options PORT         the SOL_LOOPFAST option's answers (loopfast.h)
//	                     on an unconnected socket, a connected one (dialed
//	                     to PORT), a listener opted in before listen and
//	                     one opted in after, each answer printed: a number,
//	                     "ok", or the error.
//
// SV_HOST in the environment: the address to listen on and to dial
// (127.0.0.1 when unset; "::1", "::" for IPv6 and a dual-stack listener).
//
// Signals are Go's defaults: SIGTERM ends the program by that signal.
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func host() string {
	if h := os.Getenv("SV_HOST"); h != "" {
		return h
	}
	return "127.0.0.1"
}

func listen() net.Listener {
	l, err := net.Listen("tcp", net.JoinHostPort(host(), "0"))
	if err != nil {
		fmt.Println("listen", err)
		os.Exit(1)
	}
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	return l
}

func echoServer(mode string) {
	l := listen()
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Println("accept", err)
			os.Exit(1)
		}
		if mode == "log" || mode == "relisten" {
			fmt.Println("accepted", c.LocalAddr(), c.RemoteAddr())
		}
		if mode != "relisten" {
			go func() {
				io.Copy(c, c)
				c.Close()
			}()
			continue
		}
		io.Copy(c, c)
		c.Close()
		addr := l.Addr().String()
		l.Close()
		if l, err = net.Listen("tcp", addr); err != nil {
			fmt.Println("relisten", err)
			os.Exit(1)
		}
		fmt.Println("relisten ok")
		mode = "log"
	}
}

func httpServer() {
	l := listen()
	release := make(chan bool)
	go func() {
		for in := bufio.NewScanner(os.Stdin); in.Scan(); {
			release <- true
		}
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path[1:]
		if strings.HasPrefix(name, "held/") {
			name = name[5:]
			fmt.Println("held", name)
			<-release
		}
		fmt.Fprintf(w, "hello %s from go\n", name)
	})
	fmt.Println("serve", http.Serve(l, nil))
	os.Exit(1)
}

func echoClient(port string, n int, wait bool) {
	c, err := net.Dial("tcp", net.JoinHostPort(host(), port))
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
	if wait {
		fmt.Println("waiting")
		time.Sleep(time.Hour)
	}
}

func httpClient(port, name string) {
	r, err := http.Get("http://127.0.0.1:" + port + "/" + name)
	if err != nil {
		fmt.Println("get", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	fmt.Printf("status %d body %q\n", r.StatusCode, b)
}

const solLoopfast = 0x4c46

func options(port string) {
	get := func(fd uintptr, opt int) string {
		v, err := syscall.GetsockoptInt(int(fd), solLoopfast, opt)
		if err != nil {
			return err.Error()
		}
		return strconv.Itoa(v)
	}
	set := func(fd uintptr, opt, v int) string {
		if err := syscall.SetsockoptInt(int(fd), solLoopfast, opt, v); err != nil {
			return err.Error()
		}
		return "ok"
	}
	each := func(what string, c syscall.RawConn, f func(fd uintptr) []string) {
		c.Control(func(fd uintptr) { fmt.Println(what, strings.Join(f(fd), " | ")) })
	}
	optIn := func(_, _ string, c syscall.RawConn) error {
		each("unconnected", c, func(fd uintptr) []string { return []string{get(fd, 1), set(fd, 1, 1), get(fd, 1)} })
		return nil
	}
	conn, err := (&net.Dialer{Control: optIn}).Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Println("connect", err)
		os.Exit(1)
	}
	raw, _ := conn.(*net.TCPConn).SyscallConn()
	each("connected", raw, func(fd uintptr) []string {
		return []string{get(fd, 1), set(fd, 1, 1), set(fd, 1, 0), set(fd, 2, 10), get(fd, 2)}
	})
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { set(fd, 1, 1) })
		return nil
	}}
	l, _ := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	raw, _ = l.(*net.TCPListener).SyscallConn()
	each("listener", raw, func(fd uintptr) []string { return []string{get(fd, 1), set(fd, 1, 0)} })
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	raw, _ = l2.(*net.TCPListener).SyscallConn()
	each("listener-after", raw, func(fd uintptr) []string { return []string{get(fd, 1), set(fd, 1, 1), get(fd, 1)} })
	go func() {
		if c, err := l2.Accept(); err == nil {
			io.Copy(c, c)
		}
	}()
	c2, err := (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { set(fd, 1, 1) })
		return nil
	}}).Dial("tcp", l2.Addr().String())
	if err != nil {
		fmt.Println("connect", err)
		os.Exit(1)
	}
	raw, _ = c2.(*net.TCPConn).SyscallConn()
	each("connected-after", raw, func(fd uintptr) []string { return []string{get(fd, 1)} })
}

func main() {
	arg := func(i int) string {
		if i < len(os.Args) {
			return os.Args[i]
		}
		return ""
	}
	switch arg(1) {
	case "echo-server":
		echoServer(arg(2))
	case "http-server":
		httpServer()
	case "echo-client":
		n, _ := strconv.Atoi(arg(3))
		echoClient(arg(2), n, arg(4) == "wait")
	case "http-client":
		httpClient(arg(2), arg(3))
	case "options":
		options(arg(2))
	default:
		fmt.Println("usage: sv_go echo-server|http-server|echo-client PORT N [wait]|http-client PORT NAME")
		os.Exit(2)
	}
}
