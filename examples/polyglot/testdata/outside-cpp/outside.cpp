// The C SDK's fixture of the http, media and ai wrappers built as C++:
// moat.h is one header for both languages, and this holds its C++ build
// to the same table of tests (TestSDKOutside) as the C one.
#include "../outside-c/outside.c"
