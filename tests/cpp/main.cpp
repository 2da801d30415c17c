// main.cpp — the one translation unit that holds Catch2's runner. Every other test file
// includes helpers.h (which includes <catch2/catch.hpp>) and only declares TEST_CASEs.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
