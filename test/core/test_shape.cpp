#include <gtest/gtest.h>

#include "core/error.h"
#include "core/shape.h"

namespace gridnn {
namespace {

TEST(Shape, SizesStridesAndNames) {
  Shape s{2, 3, 4, 5, 6};
  EXPECT_EQ(s.rank(), 5);
  EXPECT_EQ(s.numel(), 720);
  EXPECT_EQ(s.stride(0), 360);
  EXPECT_EQ(s.stride(4), 1);
  EXPECT_EQ(s.stride(-2), 6);
  EXPECT_EQ(s[-1], 6);
  EXPECT_EQ(s.str(), "[2, 3, 4, 5, 6]");
  EXPECT_EQ(s.with(1, 7).numel(), 1680);
  EXPECT_EQ(Shape{}.numel(), 1);  // scalar
  EXPECT_EQ((Shape{4, 0, 2}.numel()), 0);
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_NE((Shape{2, 3}), (Shape{3, 2}));
}

TEST(Shape, RejectsBadShapesWithClearMessages) {
  try {
    Shape s{1, 2, 3, 4, 5, 6};
    FAIL() << "six dimensions accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW((Shape{2, -1}), Error);
  EXPECT_THROW((Shape{2, 3})[2], Error);
  EXPECT_THROW((Shape{int64_t(1) << 40, int64_t(1) << 40}), Error);  // overflows int64
  // Empty, but the strides of the other dimensions would still overflow.
  EXPECT_THROW((Shape{0, int64_t(1) << 62, int64_t(1) << 62}), Error);
}

}  // namespace
}  // namespace gridnn
