# Native plugins (issue 14): examples/hello-python-native runs Debian's
# python3 with numpy, a package the WebAssembly Python lacks, as confined
# long-lived workers; host/native's plugin tests run it (and fail under
# MOAT_REQUIRE_TOOLS=1 without it).

APT_PACKAGES += python3-numpy

# Java, Perl, Lua and PHP (issue 33): Debian's OpenJDK (javac and java,
# both confined natively: languages/java), perl, lua5.4 and the PHP CLI.
APT_PACKAGES += openjdk-17-jdk-headless perl lua5.4 php8.2-cli
