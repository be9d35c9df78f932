#include <doctest/doctest.h>

#include "objstore/objstore.h"

using fc::objstore::Provider;

TEST_CASE("Range values") {
  auto closed = fc::objstore::parse_range("bytes=4194304-8388607");
  REQUIRE(closed);
  CHECK(closed->first == 4194304u);
  CHECK(closed->last == 8388607u);
  CHECK(closed->length() == 4194304u);
  auto open = fc::objstore::parse_range("bytes=100-");
  REQUIRE(open);
  CHECK(open->first == 100u);
  CHECK_FALSE(open->last);
  CHECK_FALSE(open->length());
  auto suffix = fc::objstore::parse_range("bytes=-500");
  REQUIRE(suffix);
  CHECK(suffix->length() == 500u);
  CHECK(fc::objstore::parse_range(" bytes=0-0 ")->length() == 1u);
  CHECK_FALSE(fc::objstore::parse_range("bytes=10-5"));
  CHECK_FALSE(fc::objstore::parse_range("items=0-5"));
  CHECK_FALSE(fc::objstore::parse_range("bytes=x-5"));
  CHECK_FALSE(fc::objstore::parse_range(""));
}

TEST_CASE("S3 path style and virtual-host style") {
  auto path = fc::objstore::parse_object_target("s3.eu-west-1.amazonaws.com",
                                                "/bkt/a/b%20c.log?x-id=GetObject");
  CHECK(path.provider == Provider::kS3PathStyle);
  CHECK(path.bucket == "bkt");
  CHECK(path.key == "a/b c.log");
  auto vhost = fc::objstore::parse_object_target("my.dotted.bucket.s3.us-east-1.amazonaws.com:443",
                                                 "/prefix/t-AAAAAAAAAAAAAAAAAAAAAA/0/x.log");
  CHECK(vhost.provider == Provider::kS3VirtualHost);
  CHECK(vhost.bucket == "my.dotted.bucket");
  CHECK(vhost.key == "prefix/t-AAAAAAAAAAAAAAAAAAAAAA/0/x.log");
  auto legacy = fc::objstore::parse_object_target("bkt.s3-us-west-2.amazonaws.com", "/k");
  CHECK(legacy.provider == Provider::kS3VirtualHost);
  CHECK(legacy.bucket == "bkt");
  auto local = fc::objstore::parse_object_target("127.0.0.1:4568", "/tiered/k/1");
  CHECK(local.provider == Provider::kS3PathStyle);
  CHECK(local.bucket == "tiered");
  CHECK(local.key == "k/1");
  const std::string suffixes[] = {"minio.internal"};
  auto custom = fc::objstore::parse_object_target("bkt.minio.internal:9000", "/k/2", suffixes);
  CHECK(custom.provider == Provider::kS3VirtualHost);
  CHECK(custom.bucket == "bkt");
  CHECK(custom.key == "k/2");
  auto proxied = fc::objstore::parse_object_target("", "http://bkt.s3.amazonaws.com/k/3");
  CHECK(proxied.provider == Provider::kS3VirtualHost);
  CHECK(proxied.key == "k/3");
}

TEST_CASE("GCS XML and JSON APIs") {
  auto xml = fc::objstore::parse_object_target("storage.googleapis.com", "/bkt/dir/obj.log");
  CHECK(xml.provider == Provider::kGcsXml);
  CHECK(xml.bucket == "bkt");
  CHECK(xml.key == "dir/obj.log");
  auto xml_vhost = fc::objstore::parse_object_target("bkt.storage.googleapis.com", "/dir/obj.log");
  CHECK(xml_vhost.provider == Provider::kGcsXml);
  CHECK(xml_vhost.bucket == "bkt");
  CHECK(xml_vhost.key == "dir/obj.log");
  auto json = fc::objstore::parse_object_target(
      "storage.googleapis.com", "/storage/v1/b/bkt/o/dir%2Fobj.log?alt=media&generation=1");
  CHECK(json.provider == Provider::kGcsJson);
  CHECK(json.bucket == "bkt");
  CHECK(json.key == "dir/obj.log");
  auto download = fc::objstore::parse_object_target(
      "storage.googleapis.com", "/download/storage/v1/b/bkt/o/a%2Fb%2Fc.log?alt=media");
  CHECK(download.provider == Provider::kGcsJson);
  CHECK(download.key == "a/b/c.log");
}

TEST_CASE("Azure Blob") {
  auto blob = fc::objstore::parse_object_target("acct.blob.core.windows.net",
                                                "/container/dir/seg.log?sv=2021&sig=x");
  CHECK(blob.provider == Provider::kAzureBlob);
  CHECK(blob.bucket == "container");
  CHECK(blob.key == "dir/seg.log");
}

TEST_CASE("Aiven layout: topic names with '-', any prefix, all three suffixes") {
  fc::objstore::AivenLayout layout;
  auto log = layout.parse(
      "tiered-storage/click-stream-v2-gT5bX0YqRkOyQ3uLm9a_Aw/3/"
      "00000000000000004096-Q2xpY2tTdHJlYW1TZWcwMQ.log");
  REQUIRE(log.parsed);
  CHECK(log.topic == "click-stream-v2");
  CHECK(log.topic_id == "gT5bX0YqRkOyQ3uLm9a_Aw");
  CHECK(log.partition == 3);
  CHECK(log.base_offset == 4096);
  CHECK(log.segment_id == "Q2xpY2tTdHJlYW1TZWcwMQ");
  CHECK(log.suffix == "log");
  // The id itself may contain '-' and '_'; no prefix at all.
  auto indexes =
      layout.parse("orders-a-b_cdefghijklmnopqrst/12/00000000000000000000-x-y_z.indexes");
  REQUIRE(indexes.parsed);
  CHECK(indexes.topic == "orders");
  CHECK(indexes.topic_id == "a-b_cdefghijklmnopqrst");
  CHECK(indexes.partition == 12);
  CHECK(indexes.suffix == "indexes");
  auto manifest = layout.parse(
      "a/b/c/t-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000007-BBBBBBBBBBBBBBBBBBBBBB.rsm-manifest");
  REQUIRE(manifest.parsed);
  CHECK(manifest.topic == "t");
  CHECK(manifest.base_offset == 7);
  CHECK(manifest.suffix == "rsm-manifest");
  CHECK_FALSE(layout.parse("t-AAAAAAAAAAAAAAAAAAAAA/0/00000000000000000007-B.log").parsed);  // 21
  CHECK_FALSE(layout.parse("t-AAAAAAAAAAAAAAAAAAAAAA/x/00000000000000000007-B.log").parsed);
  CHECK_FALSE(layout.parse("t-AAAAAAAAAAAAAAAAAAAAAA/0/0000000000000000007-B.log").parsed);
  CHECK_FALSE(layout.parse("t-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000007-B").parsed);
  CHECK_FALSE(layout.parse("tAAAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000007-B.log").parsed);
  CHECK_FALSE(layout.parse("").parsed);
  CHECK_FALSE(layout.parse("/").parsed);
}

TEST_CASE("regex layout: named groups mapped to indices") {
  auto layout = fc::objstore::RegexLayout::create(
      R"(^(?:archive|live)/(?<topic>[^/]+)/p(?P<partition>\d+)/(\d+)-(?<base_offset>\d{20})\.log$)");
  REQUIRE(layout.ok());
  auto fields = (*layout)->parse("live/orders.v1/p7/1700000000-00000000000000000123.log");
  REQUIRE(fields.parsed);
  CHECK(fields.topic == "orders.v1");
  CHECK(fields.partition == 7);
  CHECK(fields.base_offset == 123);
  CHECK_FALSE((*layout)->parse("cold/orders.v1/p7/1-00000000000000000123.log").parsed);
  // Results are cached per key: repeated and interleaved keys give the same answers.
  for (int i = 0; i < 3; ++i) {
    CHECK((*layout)->parse("live/orders.v1/p7/1700000000-00000000000000000123.log").partition == 7);
    CHECK((*layout)->parse("live/x/p8/1-00000000000000000009.log").base_offset == 9);
    CHECK_FALSE((*layout)->parse("cold/orders.v1/p7/1-00000000000000000123.log").parsed);
  }

  // Escaped parentheses and '(' inside a class are not groups.
  auto tricky = fc::objstore::RegexLayout::create(
      R"(\((x)\)[(]*(?<topic_id>[A-Za-z0-9_-]{22})/(?<partition>\d+))");
  REQUIRE(tricky.ok());
  auto tricky_fields = (*tricky)->parse("(x)((AAAAAAAAAAAAAAAAAAAAAA/5");
  REQUIRE(tricky_fields.parsed);
  CHECK(tricky_fields.topic_id == "AAAAAAAAAAAAAAAAAAAAAA");
  CHECK(tricky_fields.partition == 5);

  auto spec = fc::objstore::make_key_layout("regex:(?<topic>\\w+)-(?<partition>\\d+)");
  REQUIRE(spec.ok());
  CHECK((*spec)->parse("orders-3").partition == 3);
  CHECK(fc::objstore::make_key_layout("aiven").ok());
}

TEST_CASE("regex layout errors say what is wrong") {
  auto unknown = fc::objstore::RegexLayout::create("(?<topik>.*)/(?<partition>\\d+)");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("unknown group name 'topik'") != std::string::npos);
  auto no_partition = fc::objstore::RegexLayout::create("(?<topic>.*)");
  REQUIRE_FALSE(no_partition.ok());
  CHECK(no_partition.error().message.find("partition") != std::string::npos);
  auto invalid = fc::objstore::RegexLayout::create("(?<topic>*)/(?<partition>\\d+)");
  REQUIRE_FALSE(invalid.ok());
  CHECK(invalid.error().message.find("invalid pattern") != std::string::npos);
  auto unclosed = fc::objstore::RegexLayout::create("(?<topic");
  REQUIRE_FALSE(unclosed.ok());
  auto spec = fc::objstore::make_key_layout("glob:*");
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.error().message.find("expected \"aiven\"") != std::string::npos);
}
