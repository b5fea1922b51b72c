"""hello-python-native: a native moat plugin in Python, using numpy.

greet reads a name (default "world"), logs it, counts its calls in the
key-value store and answers with the greeting. stats takes a JSON list of
numbers and answers their count, mean, standard deviation and median,
computed with numpy. A bad input fails with invalid_argument."""
import numpy as np

import moat


@moat.action("greet")
def greet(inp):
    name = inp.text.strip() or "world"
    moat.log.info("greeting", name=name)
    count = int(moat.kv.get_str("count") or "0") + 1
    moat.kv.put("count", str(count))
    return f"{moat.config('greeting', 'Hello')}, {name}! (call #{count}, numpy {np.__version__})"


@moat.action("stats")
def stats(inp):
    try:
        xs = np.asarray(inp.json(), dtype=np.float64)
    except (ValueError, TypeError) as e:
        raise moat.MoatError("invalid_argument", f"want a JSON list of numbers: {e}") from None
    if xs.ndim != 1 or xs.size == 0:
        raise moat.MoatError("invalid_argument", "want a non-empty JSON list of numbers")
    moat.log.info("stats", n=int(xs.size))
    return {"n": int(xs.size), "mean": float(xs.mean()), "std": float(xs.std()), "median": float(np.median(xs))}


moat.serve()
