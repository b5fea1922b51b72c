local line = io.read("l")
print(string.format("%s %s from %s", os.getenv("GREETING") or "?", line, arg[1]))
io.stderr:write("bye\n")
os.exit(3)
