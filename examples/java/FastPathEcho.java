/* A Java echo server and client, each opting its socket in with loopfast's
 * socket option (SOL_LOOPFAST 0x4c46, LOOPFAST_FAST_PATH 1).
 *
 * The JDK's public API cannot set it: setOption takes only the JDK's own
 * SocketOptions (a custom one throws UnsupportedOperationException). What
 * the JDK does expose, behind --add-opens, is the native call its own
 * options use, sun.nio.ch.Net.setIntOption0(fd, false, level, opt, value,
 * false), which calls setsockopt(2); that is what enable() uses. Without
 * --add-opens (or on a JDK without that method) enable() says so and the
 * program carries on over TCP; `loopfast run` (whole process) needs none of
 * this.
 *
 *   javac FastPathEcho.java
 *   J="java --add-opens java.base/sun.nio.ch=ALL-UNNAMED"
 *   loopfast run --per-socket -- $J FastPathEcho server
 *   loopfast run --per-socket -- $J FastPathEcho client PORT   (echoes stdin's lines)
 */
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.NetworkChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

public class FastPathEcho {
    static final int SOL_LOOPFAST = 0x4c46, LOOPFAST_FAST_PATH = 1;

    static FileDescriptor fd(NetworkChannel ch) throws ReflectiveOperationException {
        Method m = ch.getClass().getMethod("getFD");
        m.setAccessible(true);
        return (FileDescriptor) m.invoke(ch);
    }

    static Method net(String name, Class<?>... types) throws ReflectiveOperationException {
        Method m = Class.forName("sun.nio.ch.Net").getDeclaredMethod(name, types);
        m.setAccessible(true);
        return m;
    }

    /** Opts ch in; false (and why, on stderr) when it could not. */
    static boolean enable(NetworkChannel ch) {
        try {
            net("setIntOption0", FileDescriptor.class, boolean.class, int.class, int.class, int.class, boolean.class)
                .invoke(null, fd(ch), false, SOL_LOOPFAST, LOOPFAST_FAST_PATH, 1, false);
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            System.err.println("fast path not enabled (" + c + "): plain TCP");
            return false;
        }
    }

    /** "fast path" or "plain TCP", as the option answers; "not known" when it cannot be asked. */
    static String path(NetworkChannel ch) {
        try {
            int on = (int) net("getIntOption0", FileDescriptor.class, boolean.class, int.class, int.class)
                .invoke(null, fd(ch), false, SOL_LOOPFAST, LOOPFAST_FAST_PATH);
            return on == 1 ? "fast path" : "plain TCP";
        } catch (java.lang.reflect.InvocationTargetException e) {
            return "plain TCP"; // the kernel refused the option: no loopfast
        } catch (ReflectiveOperationException | RuntimeException e) {
            return "not known (run java with --add-opens java.base/sun.nio.ch=ALL-UNNAMED)";
        }
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("server")) {
            ServerSocketChannel ls = ServerSocketChannel.open();
            ls.bind(new InetSocketAddress("127.0.0.1", 0));
            enable(ls);
            System.out.println("listening on " + ((InetSocketAddress) ls.getLocalAddress()).getPort());
            for (;;) {
                SocketChannel c = ls.accept();
                System.out.println("accepted: " + path(c));
                ByteBuffer b = ByteBuffer.allocate(4096);
                while (c.read(b) > 0) {
                    b.flip();
                    while (b.hasRemaining())
                        c.write(b);
                    b.clear();
                }
                c.close();
            }
        }
        SocketChannel s = SocketChannel.open();
        enable(s); // before connect
        s.connect(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[1])));
        System.out.println("connected: " + path(s));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            byte[] out = (line + "\n").getBytes(StandardCharsets.UTF_8);
            s.write(ByteBuffer.wrap(out));
            ByteBuffer back = ByteBuffer.allocate(out.length);
            while (back.hasRemaining() && s.read(back) > 0) { }
            System.out.print("echo: " + new String(back.array(), 0, back.position(), StandardCharsets.UTF_8));
        }
        s.close();
    }
}
