// A private copy of the one libstdc++ function that GCC 11 and newer headers call and that only
// libstdc++ 11 and newer export (symbol version GLIBCXX_3.4.29): std::__throw_bad_array_new_length,
// called where an allocation's element count overflows. setup.py builds this file into a static
// archive linked with --exclude-libs, so the definition stays local to each of tf_ops' libraries:
// they then need only what libstdc++ 5.1 exports (GLIBCXX_3.4.21), and the wheel's manylinux tag
// is set by glibc, not by the compiler that built it. Linux toolchains that target older systems
// (the manylinux images' devtoolset) link the same function statically for the same reason.
#include <new>

namespace std {
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
}  // namespace std
