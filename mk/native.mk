# Native plugins (issue 14): examples/hello-python-native runs Debian's
# python3 with numpy, a package the WebAssembly Python lacks, as confined
# long-lived workers; host/native's plugin tests run it (and fail under
# MOAT_REQUIRE_TOOLS=1 without it).

APT_PACKAGES += python3-numpy
# pandas for python3-native runs (issue 33, item 4): numpy and pandas are
# what Judge0's and Piston's users ask for most; the language holds their
# numerical libraries to one thread (languages/nativepython).
APT_PACKAGES += python3-pandas

# Java, Perl, Lua and PHP (issue 33): Debian's OpenJDK (javac and java,
# both confined natively: languages/java), perl, lua5.4 and the PHP CLI.
# Kotlin (languages/kotlin) runs its compiler, which `make toolchains`
# fetches from npm, and its programs on the same OpenJDK.
APT_PACKAGES += openjdk-17-jdk-headless perl lua5.4 php8.2-cli
