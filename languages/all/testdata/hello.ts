const buf = new ArrayBuffer(256);
const n = process.stdin.read(buf);
const line = String.UTF8.decode(buf.slice(0, n)).trimEnd();
const g = process.env.has("GREETING") ? process.env.get("GREETING") : "?";
const args = process.argv;
console.log(g + " " + line + " from " + (args.length > 1 ? args[1] : "?"));
process.stderr.write("bye\n");
process.exit(3);
