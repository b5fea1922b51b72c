interface Greeting {
  word: string;
  name: string;
}

const line: string = std.in.getline().trim();
const g: Greeting = { word: std.getenv("GREETING") ?? "?", name: line };
function greet({ word, name }: Greeting, from: string): string {
  return `${word} ${name} from ${from}`;
}
print(greet(g, scriptArgs[1] as string));
std.err.puts("bye\n");
std.exit(3);
