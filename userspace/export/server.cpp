#include <httplib.h>

#include <thread>

#include "export/export.h"

namespace fc::exporter {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}
HttpServer::~HttpServer() {
  stop();
}

namespace {
void respond(HttpResponse r, httplib::Response& res) {
  res.status = r.status;
  if (!r.stream) {
    res.set_content(r.body, r.content_type);
    return;
  }
  res.set_chunked_content_provider(
      r.content_type, [stream = std::move(r.stream)](std::size_t, httplib::DataSink& sink) {
        stream([&](std::string_view piece) { return sink.write(piece.data(), piece.size()); });
        sink.done();
        return true;
      });
}

httplib::Server::Handler wrap(HttpHandler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    respond(handler(req.body), res);
  };
}
}  // namespace

void HttpServer::get(const std::string& path, HttpHandler handler) {
  impl_->server.Get(path, wrap(std::move(handler)));
}
void HttpServer::get_with_query(const std::string& path, HttpQueryHandler handler) {
  impl_->server.Get(
      path, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        std::map<std::string, std::string> query;
        for (const auto& [key, value] : req.params) query.emplace(key, value);
        respond(handler(query), res);
      });
}
void HttpServer::post(const std::string& path, HttpHandler handler) {
  impl_->server.Post(path, wrap(std::move(handler)));
}

Result<int> HttpServer::start(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos)
    return make_error("listen address \"" + address + "\" must be host:port, e.g. 127.0.0.1:9464");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    return make_error("listen address \"" + address + "\" has no valid port");
  }
  if (port == 0) {
    port = impl_->server.bind_to_any_port(host);
    if (port < 0) return make_error("cannot listen on " + address);
  } else if (!impl_->server.bind_to_port(host, port)) {
    return make_error("cannot listen on " + address +
                      ": the address is in use or not local (set listen in the config)");
  }
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  return port;
}

void HttpServer::stop() {
  if (impl_->thread.joinable()) {
    impl_->server.stop();
    impl_->thread.join();
  }
}

}  // namespace fc::exporter
