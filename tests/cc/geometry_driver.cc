// Reads cases from stdin and prints what cc/core/conv_geometry computes, one line each.
//   W in k dilation stride padding(S|V|E) pad_before pad_after  ->  "OK out before after" | "ERR message"
//   G n h w c kh kw fi k stride dilation padding(S|V|E) pt pb pl pr  ->  "OK oh ow" | "ERR message"
// TF-free: built with the compiler alone, so the geometry is tested in isolation.
#include <iostream>
#include <sstream>
#include <string>

#include "cc/core/conv_geometry.h"

using tf_ops::Padding;

static Padding ParsePadding(char p) {
  return p == 'S' ? Padding::kSame : p == 'V' ? Padding::kValid : Padding::kExplicit;
}

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    char kind, p;
    in >> kind;
    if (kind == 'W') {
      int64_t size, k, d, s, before, after, out = -1;
      in >> size >> k >> d >> s >> p >> before >> after;
      const std::string err =
          tf_ops::WindowedOutputSize(size, k, d, s, ParsePadding(p), &before, &after, &out);
      if (err.empty()) {
        std::cout << "OK " << out << " " << before << " " << after << "\n";
      } else {
        std::cout << "ERR " << err << "\n";
      }
    } else {
      int64_t n, h, w, c, kh, kw, fi, k, s, d, pt, pb, pl, pr;
      in >> n >> h >> w >> c >> kh >> kw >> fi >> k >> s >> d >> p >> pt >> pb >> pl >> pr;
      tf_ops::ConvAttrs a;
      a.stride_rows = a.stride_cols = s;
      a.dilation_rows = a.dilation_cols = d;
      a.padding = ParsePadding(p);
      a.pad_top = pt, a.pad_bottom = pb, a.pad_left = pl, a.pad_right = pr;
      tf_ops::ConvGeometry g;
      const std::string err = tf_ops::MakeConvGeometry(n, h, w, c, kh, kw, fi, k, a, &g);
      if (err.empty()) {
        std::cout << "OK " << g.out_rows << " " << g.out_cols << "\n";
      } else {
        std::cout << "ERR " << err << "\n";
      }
    }
  }
  return 0;
}
