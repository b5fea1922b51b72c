const line = std.in.getline().trim();
print(`${std.getenv("GREETING") ?? "?"} ${line} from ${scriptArgs[1]}`);
std.err.puts("bye\n");
std.exit(3);
