"""hello-python is a minimal moat plugin in Python. Its one action, greet,
takes a name (default "world"), logs it, counts its calls in the key-value
store and returns the greeting. The script runs once per instance; the
instance serves many calls (moat.action registers the handler)."""
import moat


@moat.action("greet")
def greet(inp):
    name = inp.text.strip() or "world"
    greeting = moat.config("greeting", "Hello")
    moat.log.info("greeting", name=name)
    count = int(moat.kv.get_str("count") or "0") + 1
    moat.kv.put("count", str(count))
    return f"{greeting}, {name}! (call #{count})"
