read -r line
echo "$GREETING $line from $1"
echo bye >&2
exit 3
