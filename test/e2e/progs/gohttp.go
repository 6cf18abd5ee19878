// A net/http server and client for test_signals.py (the standard library
// only). Built with cgo (Go's default where a C compiler exists), so the
// binary is linked against libc and loads loopfast's preload, which wraps
// the signal handlers Go's runtime installs through libc's sigaction.
//
//	gohttp server          serves on 127.0.0.1:0, prints "port N"; Go's
//	                       default dispositions: SIGTERM, SIGINT and SIGHUP
//	                       kill it, SIGQUIT dumps goroutines and exits 2
//	gohttp server-notify   the same, but signal.Notify(SIGTERM): prints
//	                       "stopping" and exits 0 after a clean Shutdown
//	gohttp client PORT     GETs /ping in a loop on one keep-alive
//	                       connection, prints "ok" after the first answer
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func serve(notify bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pong\n")
	})}
	done := make(chan struct{})
	if notify {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		go func() {
			<-ch
			fmt.Println("stopping")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			close(done)
		}()
	}
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	<-done
	os.Exit(0)
}

func client(port string) {
	url := "http://127.0.0.1:" + port + "/ping"
	first := true
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if first {
				fmt.Println("ok")
				first = false
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "server":
		serve(false)
	case len(os.Args) == 2 && os.Args[1] == "server-notify":
		serve(true)
	case len(os.Args) == 3 && os.Args[1] == "client":
		client(os.Args[2])
	default:
		fmt.Fprintln(os.Stderr, "usage: gohttp server|server-notify|client PORT")
		os.Exit(2)
	}
}
