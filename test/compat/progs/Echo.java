// A Java server and client over java.net sockets, Nagle left on (the default).
//   java Echo server          listens on every address (new ServerSocket(0): the wildcard,
//                             dual-stack [::] as Java binds it), a kernel-chosen port; for
//                             each connection (a thread each): answers lines upper-cased
//                             until a line "DATA n", then reads n bytes and answers their
//                             SHA-256 in hex.
//   java Echo client PORT     200 request/response round trips, then sends all of its
//                             stdin (so it holds the connection until stdin ends) and
//                             prints what came back.
import java.io.*;
import java.net.*;
import java.security.MessageDigest;

public class Echo {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("server")) {
            ServerSocket ls = new ServerSocket(0);
            for (;;) {
                Socket s = ls.accept();
                new Thread(() -> serve(s)).start();
            }
        }
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), Integer.parseInt(args[1]))) {
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), "UTF-8"));
            OutputStream out = s.getOutputStream();
            int ok = 0;
            for (int i = 0; i < 200; i++) {
                out.write(("request " + i + "\n").getBytes("UTF-8"));
                out.flush();
                if (in.readLine().equals("REQUEST " + i)) ok++;
            }
            System.out.println("round trips: " + ok);
            byte[] data = System.in.readAllBytes();
            out.write(("DATA " + data.length + "\n").getBytes("UTF-8"));
            out.write(data);
            out.flush();
            System.out.println("sha256: " + in.readLine());
        }
    }

    static void serve(Socket s) {
        try (s) {
            DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            OutputStream out = s.getOutputStream();
            for (;;) {
                StringBuilder line = new StringBuilder();
                for (int c; (c = in.read()) != '\n'; line.append((char) c))
                    if (c < 0) return;
                if (line.toString().startsWith("DATA ")) {
                    byte[] data = new byte[Integer.parseInt(line.substring(5))];
                    in.readFully(data);
                    StringBuilder hex = new StringBuilder();
                    for (byte b : MessageDigest.getInstance("SHA-256").digest(data))
                        hex.append(String.format("%02x", b));
                    out.write((hex + "\n").getBytes("UTF-8"));
                } else {
                    out.write((line.toString().toUpperCase() + "\n").getBytes("UTF-8"));
                }
                out.flush();
            }
        } catch (Exception e) {
            e.printStackTrace();
        }
    }
}
