#include "kafka/kafka.h"

namespace fc::kafka {

const char* api_name(std::int16_t api_key) {
  static constexpr const char* kNames[] = {"Produce",
                                           "Fetch",
                                           "ListOffsets",
                                           "Metadata",
                                           "LeaderAndIsr",
                                           "StopReplica",
                                           "UpdateMetadata",
                                           "ControlledShutdown",
                                           "OffsetCommit",
                                           "OffsetFetch",
                                           "FindCoordinator",
                                           "JoinGroup",
                                           "Heartbeat",
                                           "LeaveGroup",
                                           "SyncGroup",
                                           "DescribeGroups",
                                           "ListGroups",
                                           "SaslHandshake",
                                           "ApiVersions",
                                           "CreateTopics",
                                           "DeleteTopics",
                                           "DeleteRecords",
                                           "InitProducerId",
                                           "OffsetForLeaderEpoch",
                                           "AddPartitionsToTxn",
                                           "AddOffsetsToTxn",
                                           "EndTxn",
                                           "WriteTxnMarkers",
                                           "TxnOffsetCommit",
                                           "DescribeAcls",
                                           "CreateAcls",
                                           "DeleteAcls",
                                           "DescribeConfigs",
                                           "AlterConfigs",
                                           "AlterReplicaLogDirs",
                                           "DescribeLogDirs",
                                           "SaslAuthenticate",
                                           "CreatePartitions"};
  if (api_key >= 0 && api_key < static_cast<int>(std::size(kNames))) return kNames[api_key];
  return "unknown";
}

bool Uuid::is_zero() const {
  for (auto b : bytes) {
    if (b) return false;
  }
  return true;
}

std::string Uuid::to_base64() const {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve(22);
  std::uint32_t acc = 0;
  int bits = 0;
  for (auto b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 0x3f]);
    }
  }
  if (bits) out.push_back(kAlphabet[(acc << (6 - bits)) & 0x3f]);
  return out;
}

const char* to_string(FetchSessionKind kind) {
  switch (kind) {
    case FetchSessionKind::kSessionless:
      return "sessionless";
    case FetchSessionKind::kFullNewSession:
      return "full";
    case FetchSessionKind::kIncremental:
      return "incremental";
    case FetchSessionKind::kCloseSession:
      return "close";
  }
  return "unknown";
}

void FetchExchange::clear() {
  // Vectors and strings keep their capacity: exchanges are recycled per connection.
  replica_id = -1;
  max_wait_ms = min_bytes = max_bytes = 0;
  isolation_level = 0;
  session_id = 0;
  session_epoch = -1;
  session_kind = FetchSessionKind::kSessionless;
  rack_id.clear();
  topics.clear();
  partitions.clear();
  forgotten.clear();
  partitions_from_session = 0;
  throttle_time_ms = 0;
  error_code = 0;
  response_session_id = 0;
  records_bytes = 0;
}

void Exchange::clear() {
  connection = 0;
  client_id.clear();
  client_id_null = false;
  api_key = api_version = -1;
  correlation_id = 0;
  request_time_ns = response_start_ns = response_end_ns = 0;
  request_size = response_size = 0;
  response_seen = body_decoded = request_truncated = response_truncated = false;
  response_error_code = 0;
  fetch.clear();
  group_id.clear();
  member_id.clear();
  client_software_name.clear();
  client_software_version.clear();
  metadata_topics = 0;
}

}  // namespace fc::kafka
