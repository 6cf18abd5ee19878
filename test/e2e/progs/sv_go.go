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
//
// Signals are Go's defaults: SIGTERM ends the program by that signal.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func listen() net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
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
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
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
	default:
		fmt.Println("usage: sv_go echo-server|http-server|echo-client PORT N [wait]|http-client PORT NAME")
		os.Exit(2)
	}
}
