import os
import sys

line = sys.stdin.readline().strip()
print(f"{os.environ.get('GREETING', '?')} {line} from {sys.argv[1]}")
print("bye", file=sys.stderr)
sys.exit(3)
