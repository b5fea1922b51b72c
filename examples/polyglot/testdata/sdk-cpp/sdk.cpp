// The C SDK's conformance fixture built as C++: moat.h is one header for
// both languages, and this holds its C++ build (extern "C", the casts C++
// wants, aggregate initializers) to the same table of tests as the C one.
#include "../sdk-c/sdk.c"
