// The CSV manifest parser (models/data/manifest.h): header detection, quoting, CRLF,
// comments, path resolution, and errors that name file:line.
#include <gtest/gtest.h>

#include <string>

#include "models/data/manifest.h"
#include "test/models/data/data_test_support.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

using data::Manifest;
using data::parse_manifest;
using data::Split;
using test::contains;
using test::error_message;

TEST(Manifest, RowsWithHeaderSplitsAndResolvedPaths) {
  const Manifest m = parse_manifest(
      "path,label,split\n"
      "a.nii.gz,0,train\n"
      "sub/b.nii,3,val\n"
      "/abs/c.nii,1,test\n"
      "d.nii,2,\n"
      "e.nii,2\n",
      "list.csv", "/data/set");
  EXPECT_EQ(m.source, "list.csv");
  ASSERT_EQ(m.rows.size(), 5u);
  EXPECT_EQ(m.rows[0].path, "/data/set/a.nii.gz");
  EXPECT_EQ(m.rows[0].label, 0);
  EXPECT_EQ(m.rows[0].split, Split::train);
  EXPECT_EQ(m.rows[0].line, 2);
  EXPECT_EQ(m.rows[1].path, "/data/set/sub/b.nii");
  EXPECT_EQ(m.rows[1].label, 3);
  EXPECT_EQ(m.rows[1].split, Split::val);
  EXPECT_EQ(m.rows[2].path, "/abs/c.nii");  // absolute: kept
  EXPECT_EQ(m.rows[2].split, Split::test);
  EXPECT_EQ(m.rows[3].split, Split::unassigned);
  EXPECT_EQ(m.rows[4].split, Split::unassigned);
  EXPECT_EQ(m.rows[4].line, 6);
}

TEST(Manifest, NoHeaderCommentsBlankLinesCrlfAndQuotes) {
  const Manifest m = parse_manifest(
      "# volumes of the study\r\n"
      "\r\n"
      "  \"with, comma.nii\" , 1 , train\r\n"
      "   # indented comment\r\n"
      "\"say \"\"hi\"\".nii\",0\r\n"
      "plain.nii,7",  // no final newline
      "list.csv");
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].path, "with, comma.nii");  // no base_dir: left as written
  EXPECT_EQ(m.rows[0].label, 1);
  EXPECT_EQ(m.rows[0].split, Split::train);
  EXPECT_EQ(m.rows[0].line, 3);
  EXPECT_EQ(m.rows[1].path, "say \"hi\".nii");
  EXPECT_EQ(m.rows[1].split, Split::unassigned);
  EXPECT_EQ(m.rows[2].path, "plain.nii");
  EXPECT_EQ(m.rows[2].label, 7);
  EXPECT_EQ(m.rows[2].line, 6);
}

TEST(Manifest, HeaderWithoutSplitColumnAndInAnyCase) {
  const Manifest m = parse_manifest("Path,Label\nx.nii,1\n", "m.csv");
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].path, "x.nii");
  // "path,label" later in the file is a row, and its label is wrong.
  EXPECT_TRUE(contains(error_message([] { parse_manifest("x.nii,1\npath,label\n", "m.csv"); }),
                       "m.csv:2: label \"label\" is not a non-negative integer"));
}

TEST(Manifest, ErrorsNameFileAndLine) {
  auto message = [](const std::string& text) { return error_message([&] { parse_manifest(text, "m.csv"); }); };
  EXPECT_TRUE(contains(message("a.nii,1\nb.nii,x\n"), "m.csv:2: label \"x\" is not a non-negative integer"));
  EXPECT_TRUE(contains(message("a.nii,-1\n"), "m.csv:1: label \"-1\" is not a non-negative"));
  EXPECT_TRUE(contains(message("a.nii,1.5\n"), "m.csv:1: label \"1.5\""));
  EXPECT_TRUE(contains(message("a.nii,\n"), "m.csv:1: the label is empty"));
  EXPECT_TRUE(contains(message("a.nii,99999999999\n"), "m.csv:1: label 99999999999 is too large"));
  EXPECT_TRUE(contains(message("# c\na.nii,1,training\n"),
                       "m.csv:2: unknown split \"training\"; use train, val, test or leave it empty"));
  EXPECT_TRUE(contains(message("a.nii\n"), "m.csv:1: missing column: expected path,label[,split]"));
  EXPECT_TRUE(contains(message("a.nii,1,train,extra\n"), "m.csv:1: 4 fields; expected path,label[,split]"));
  EXPECT_TRUE(contains(message(",1\n"), "m.csv:1: the path is empty"));
  EXPECT_TRUE(contains(message("\"a.nii,1\n"), "m.csv:1: a quoted field has no closing quote"));
  EXPECT_TRUE(contains(message("\"a\"b.nii,1\n"), "m.csv:1: text after a closing quote"));
  EXPECT_TRUE(contains(message("a\"b.nii,1\n"), "m.csv:1: stray quote"));
  EXPECT_TRUE(contains(message(""), "m.csv: no rows"));
  EXPECT_TRUE(contains(message("path,label,split\n# nothing\n\n"), "m.csv: no rows"));
}

TEST(Manifest, SplitNames) {
  for (Split s : {Split::unassigned, Split::train, Split::val, Split::test})
    EXPECT_EQ(data::parse_split(data::split_name(s)), s);
  EXPECT_FALSE(data::parse_split("Train").has_value());
}

class ManifestFile : public test::ScratchDirTest {};

TEST_F(ManifestFile, RelativePathsResolveAgainstTheCsvFolder) {
  write_text(path("list.csv"), "path,label\nsub/a.nii,0\n../b.nii,1\n/c.nii,0\n");
  const Manifest m = data::read_manifest(path("list.csv"));
  EXPECT_EQ(m.source, path("list.csv"));
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].path, (dir_ / "sub" / "a.nii").string());
  EXPECT_EQ(m.rows[1].path, (dir_.parent_path() / "b.nii").string());
  EXPECT_EQ(m.rows[2].path, "/c.nii");
  EXPECT_TRUE(contains(error_message([&] { data::read_manifest(path("none.csv")); }),
                       path("none.csv") + ": cannot open the manifest"));
}

}  // namespace
}  // namespace gridnn
