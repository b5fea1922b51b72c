#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char **argv) {
	std::string line;
	std::getline(std::cin, line);
	const char *g = std::getenv("GREETING");
	std::cout << (g ? g : "?") << " " << line << " from " << (argc > 1 ? argv[1] : "?") << std::endl;
	std::cerr << "bye" << std::endl;
	return 3;
}
