// The gridnn-* programs' shared pieces (cli.h).
#include "tools/cli.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "core/error.h"
#if GRIDNN_HAVE_MPI
#include "parallel/mpi_session.h"
#endif

namespace gridnn::cli {

std::array<int64_t, 3> parse_size(const std::string& flag, const std::string& text) {
  const std::string expected = flag + ": expected DxHxW with positive integers (e.g. 32x32x32), got '" + text + "'";
  std::vector<int64_t> v;
  size_t pos = 0;
  while (true) {
    const size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    GRIDNN_REQUIRE(!part.empty() && part.size() <= 12 && part.find_first_not_of("0123456789") == std::string::npos,
                   expected);
    v.push_back(std::stoll(part));
    GRIDNN_REQUIRE(v.back() > 0, expected);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  GRIDNN_REQUIRE(v.size() == 3, flag, ": expected three sizes DxHxW, got '", text, "'");
  return {v[0], v[1], v[2]};
}

int run_mpi_program(int* argc, char*** argv, const std::function<int(const Process&)>& body) {
#if GRIDNN_HAVE_MPI
  return MpiSession::run(argc, argv, [&](MpiSession& session) {
    return body(Process{session.rank(), session.size(), session.node_rank(), session.node_size()});
  });
#else
  (void)argc;
  (void)argv;
  return run_program("gridnn", [&] { return body(Process{}); });
#endif
}

int run_program(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace gridnn::cli
