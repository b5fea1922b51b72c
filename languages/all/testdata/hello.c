#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
	char line[256] = {0};
	if (!fgets(line, sizeof line, stdin)) return 9;
	line[strcspn(line, "\n")] = 0;
	const char *g = getenv("GREETING");
	printf("%s %s from %s\n", g ? g : "?", line, argc > 1 ? argv[1] : "?");
	fprintf(stderr, "bye\n");
	return 3;
}
