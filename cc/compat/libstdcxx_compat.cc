// A private copy of the one libstdc++ function that GCC 11 and newer headers call and that only
// libstdc++ 11 and newer export (symbol version GLIBCXX_3.4.29): std::__throw_bad_array_new_length,
// called where an allocation's element count overflows. setup.py builds this file into a static
// archive linked with --exclude-libs, so the definition stays local to each of tf_ops' libraries:
// they then need only what libstdc++ 5.1 exports (GLIBCXX_3.4.21), and the wheel's manylinux tag
// is set by glibc, not by the compiler that built it. Linux toolchains that target older systems
// (the manylinux images' devtoolset) link the same function statically for the same reason.
//
// The other libstdc++ function newer than 5.1 that the sources could reach is
// std::ostringstream's default constructor (GLIBCXX_3.4.26, out of line where GCC does not inline
// it), so tf_ops' one string stream, Cat in cc/core/conv_geometry.h, is constructed with an
// explicit std::ios_base::out instead; tests/test_build_files.py reads the built libraries'
// symbol versions.
#include <new>

namespace std {
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
}  // namespace std
