"""hello-python is a minimal moat plugin in Python. Its one action, greet,
reads a name on stdin (default "world"), logs it, counts its calls in the
key-value store and prints the greeting."""
import sys

import moat

name = sys.stdin.read().strip() or "world"
greeting = moat.config("greeting", "Hello")
moat.log.info("greeting", name=name)

count = int(moat.kv.get_str("count") or "0") + 1
moat.kv.put("count", str(count))
print(f"{greeting}, {name}! (call #{count})")
