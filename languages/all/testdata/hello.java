import java.io.BufferedReader;
import java.io.InputStreamReader;

public class Main {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line = in.readLine();
        System.out.println(System.getenv("GREETING") + " " + line + " from " + args[0]);
        System.err.println("bye");
        System.exit(3);
    }
}
