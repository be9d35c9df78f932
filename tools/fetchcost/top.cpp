// `fetchcost top`: a top-like view of remote-read cost per client (ncurses), or `--once` for
// scripts. All numbers come from top_model (tested); this file is the terminal and the loop.
#include <curses.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <clocale>
#include <cstdio>
#include <ctime>
#include <deque>
#include <thread>

#include "api_client.h"
#include "commands.h"
#include "top_model.h"

namespace fc::cli {
namespace {

constexpr const char* kFlagHelp =
    "Flags:\n"
    "  SCAN    the rate window showed remote reads at each of the last --scan-streak\n"
    "          refreshes: a sustained replay of tiered history, not a one-off catch-up.\n"
    "  SMALL   read amplification (object bytes read / bytes delivered) >= --small-amp:\n"
    "          its fetches are much smaller than the object chunks, so GETs are wasted.\n"
    "  ERR     remote GETs failed within the rate window (first sample: ever).\n"
    "  EST     some of its reads were attributed by estimation (method=estimated: the\n"
    "          object-store connection was opaque TLS).\n"
    "  BUDGET  fetchcostd reports the budget of this client id or of its group exceeded.\n"
    "In narrow terminals FLAGS shows one letter per flag at a fixed place: S M E T B\n"
    "(SCAN SMALL ERR EST BUDGET), '.' when unset.\n";

constexpr const char* kKeyHelp =
    "Keys:\n"
    "  < >        sort by the previous / next column (the sort column is highlighted, v/^)\n"
    "  r          reverse the sort order\n"
    "  /          filter: type a substring of client, group, topic or flag; Enter keeps it,\n"
    "             Esc clears it\n"
    "  Up/Down    select a client (j/k too); Enter or d: drill into it (topics, partitions,\n"
    "             recent objects); Esc, Backspace, Left or b: back\n"
    "  p, space   pause / resume refreshing\n"
    "  h, ?       this help\n"
    "  q          quit\n";

constexpr const char* kColumnHelp =
    "Columns (one row per client id; rates over --window live, over --interval with --once):\n"
    "  CLIENT client id   GROUP consumer group   $/h cost rate   COST cost since start\n"
    "  B/s remote bytes/s   GET/s object GETs/s   B/GET remote bytes per GET\n"
    "  AMP object bytes read per byte delivered   P99 99th pct remote read latency\n"
    "  TPC topics read remotely   FLAGS see below\n"
    "  BY what CLIENT is: cid = a client-id read from the requests, peer = the peer address\n"
    "     (peer:<ip>) of a TLS connection fetchcost cannot read, - = unattributed\n";

struct Options {
  std::string endpoint = "http://127.0.0.1:9464";
  std::string prometheus;
  double interval = 2;
  double window = 10;
  bool once = false;
  int count = 1;
  std::string sort = "cost_per_hour";
  bool ascending = false;
  std::string filter;
  bool no_color = false;
  FlagRules rules;
};

std::unique_ptr<Source> make_source(const Options& o) {
  return o.prometheus.empty() ? endpoint_source(o.endpoint) : prometheus_source(o.prometheus);
}

int run_once(const Options& o) {
  auto column = parse_column(o.sort);
  if (!column) {
    std::fprintf(stderr, "fetchcost top: %s\n", column.error().message.c_str());
    return 2;
  }
  auto source = make_source(o);
  TopModel model(o.rules);
  auto previous = source->sample();
  if (!previous) {
    std::fprintf(stderr, "fetchcost top: %s\n", previous.error().message.c_str());
    return 1;
  }
  model.update(nullptr, *previous);
  for (int i = 0; i < o.count; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
    auto current = source->sample();
    if (!current) {
      std::fprintf(stderr, "fetchcost top: %s\n", current.error().message.c_str());
      return 1;
    }
    auto rows = filter_rows(model.update(&*previous, *current), o.filter);
    sort_rows(rows, *column, !o.ascending);
    if (i > 0) std::fputs("\n", stdout);
    std::fputs(render_once(rows, *current, current->time_seconds - previous->time_seconds).c_str(),
               stdout);
    std::fflush(stdout);
    previous = std::move(current);
  }
  return 0;
}

// ---- the terminal view ----

std::string fit(const std::string& s, std::size_t width, bool right = false) {
  if (width == 0) return "";
  std::string t = s.size() > width ? s.substr(0, width - 1) + "~" : s;
  const std::string pad(width - t.size(), ' ');
  return right ? pad + t : t + pad;
}

struct Layout {
  int width[kColumnCount];
  bool flag_words;
};

Layout layout_for(int cols) {
  //             CLIENT GROUP $/h COST B/s GET/s B/GET AMP P99 TOP FLAGS BY
  Layout l{{12, 6, 6, 6, 5, 5, 5, 4, 5, 3, 5, 4}, false};
  int used = 2;  // selection marker + space
  for (int w : l.width) used += w + 1;
  int spare = cols - used;
  auto grow = [&](int column, int up_to) {
    const int add = std::max(0, std::min(spare, up_to - l.width[column]));
    l.width[column] += add;
    spare -= add;
  };
  grow(0, 28);
  grow(1, 16);
  if (spare >= 20) {
    l.flag_words = true;
    l.width[10] = 24;
    spare -= 19;
  }
  grow(11, 9);  // "client-id" in full
  grow(0, 40);
  return l;
}

std::vector<std::string> cells(const ClientRow& r, const Layout& l) {
  return {r.client_id,
          r.group_id.empty() ? "-" : r.group_id,
          human_money(r.cost_per_hour),
          human_money(r.total_cost),
          human_bytes(r.bytes_per_second),
          [&] {
            char b[16];
            std::snprintf(b, sizeof(b), r.gets_per_second < 10 ? "%.1f" : "%.0f",
                          r.gets_per_second);
            return std::string(b);
          }(),
          human_bytes(r.bytes_per_get),
          [&] {
            char b[16];
            std::snprintf(b, sizeof(b), "%.1f", r.read_amplification);
            return std::string(b);
          }(),
          human_seconds(r.p99_seconds),
          std::to_string(r.topics.size()),
          l.flag_words ? flag_names(r.flags, " ") : flag_letters(r.flags),
          r.identity == "client-id" && l.width[11] < 9 ? "cid" : r.identity};
}

class TopView {
 public:
  TopView(Options o) : o_(std::move(o)), source_(make_source(o_)), model_(o_.rules) {}

  int run() {
    auto column = parse_column(o_.sort);
    if (!column) {
      std::fprintf(stderr, "fetchcost top: %s\n", column.error().message.c_str());
      return 2;
    }
    sort_ = *column;
    descending_ = !o_.ascending;
    filter_ = o_.filter;
    // Fail before taking over the terminal when the source is not there at all.
    auto first = source_->sample();
    if (!first) {
      std::fprintf(stderr, "fetchcost top: %s\n", first.error().message.c_str());
      return 1;
    }
    rows_ = model_.update(nullptr, *first);
    history_.push_back(*first);
    current_ = std::move(*first);
    next_sample_ = monotonic_seconds() + std::min(o_.interval, 1.0);  // rates soon after start

    std::setlocale(LC_ALL, "");
    set_escdelay(25);
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(100);
    colors_ = !o_.no_color && has_colors();
    if (colors_) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_RED, -1);
      init_pair(2, COLOR_CYAN, -1);
      init_pair(3, COLOR_YELLOW, -1);
    }
    bool quit = false;
    while (!quit) {
      if (!paused_ && monotonic_seconds() >= next_sample_) refresh_data();
      draw();
      const int key = getch();
      if (key != ERR) quit = handle(key);
    }
    endwin();
    return 0;
  }

 private:
  enum class Mode { kList, kDrill, kHelp };

  void refresh_data() {
    next_sample_ = monotonic_seconds() + o_.interval;
    auto s = source_->sample();
    if (!s) {
      message_ = s.error().message;
      return;
    }
    message_.clear();
    // Rates span the trailing window (at least one interval): kafka clients read in bursts, and
    // a one-second difference flickers between zero and a peak.
    const double window = std::max(o_.window, o_.interval);
    while (history_.size() > 1 && history_[1].time_seconds <= s->time_seconds - window + 1e-3)
      history_.pop_front();
    rows_ = model_.update(&history_.front(), *s);
    history_.push_back(*s);
    current_ = std::move(*s);
    if (mode_ == Mode::kDrill) load_recent();
  }

  std::vector<ClientRow> visible() const {
    auto rows = filter_rows(rows_, filter_);
    sort_rows(rows, sort_, descending_);
    return rows;
  }

  void load_recent() {
    auto r = source_->recent(drill_client_, 12);
    recent_ = r ? *r : nlohmann::json();
    recent_error_ = r ? "" : r.error().message;
  }

  bool handle(int key) {
    if (editing_filter_) {
      if (key == '\n' || key == KEY_ENTER)
        editing_filter_ = false;
      else if (key == 27) {
        filter_.clear();
        editing_filter_ = false;
      } else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
        if (!filter_.empty()) filter_.pop_back();
      } else if (key >= 32 && key < 127) {
        filter_.push_back(static_cast<char>(key));
      }
      selected_ = 0;
      return false;
    }
    if (key == 'q' || key == 'Q') return true;
    if (mode_ == Mode::kHelp) {
      mode_ = Mode::kList;
      return false;
    }
    if (key == 'h' || key == '?') {
      mode_ = Mode::kHelp;
      return false;
    }
    if (key == 'p' || key == ' ') {
      paused_ = !paused_;
      if (!paused_) next_sample_ = 0;
      return false;
    }
    if (mode_ == Mode::kDrill) {
      if (key == 27 || key == KEY_BACKSPACE || key == 127 || key == 8 || key == KEY_LEFT ||
          key == 'b')
        mode_ = Mode::kList;
      return false;
    }
    const auto rows = visible();
    switch (key) {
      case '<':
      case ',':
        sort_ = static_cast<Column>((static_cast<int>(sort_) + kColumnCount - 1) % kColumnCount);
        break;
      case '>':
      case '.':
        sort_ = static_cast<Column>((static_cast<int>(sort_) + 1) % kColumnCount);
        break;
      case 'r':
        descending_ = !descending_;
        break;
      case '/':
        editing_filter_ = true;
        break;
      case 27:
        filter_.clear();
        break;
      case KEY_UP:
      case 'k':
        selected_ = std::max(0, selected_ - 1);
        break;
      case KEY_DOWN:
      case 'j':
        selected_ = std::min(static_cast<int>(rows.size()) - 1, selected_ + 1);
        break;
      case KEY_HOME:
        selected_ = 0;
        break;
      case KEY_END:
        selected_ = static_cast<int>(rows.size()) - 1;
        break;
      case '\n':
      case KEY_ENTER:
      case KEY_RIGHT:
      case 'd':
        if (selected_ >= 0 && selected_ < static_cast<int>(rows.size())) {
          drill_client_ = rows[static_cast<std::size_t>(selected_)].client_id;
          mode_ = Mode::kDrill;
          load_recent();
        }
        break;
      default:
        break;
    }
    selected_ = std::max(0, selected_);
    return false;
  }

  void put(int y, int x, const std::string& text, int attrs = 0) {
    if (y >= LINES) return;
    if (attrs) attron(attrs);
    mvaddnstr(y, x, text.c_str(), std::max(0, COLS - x));
    if (attrs) attroff(attrs);
  }

  int draw_header() {
    const Totals t = totals(rows_);
    char clock[16];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
    char window[32];
    std::snprintf(window, sizeof(window), "  rates/%.0fs", std::max(o_.window, o_.interval));
    put(0, 0,
        "fetchcost top - " + current_.source + window + "  " + clock +
            (paused_ ? "  [PAUSED]" : ""),
        A_BOLD);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "total %s %s/h  cost %s  %s/s  %.1f GET/s  unattributed %.1f%%",
                  current_.currency.c_str(), human_money(t.cost_per_hour).c_str(),
                  human_money(t.total_cost).c_str(), human_bytes(t.bytes_per_second).c_str(),
                  t.gets_per_second, t.unattributed_share * 100);
    put(1, 0, line);
    std::snprintf(line, sizeof(line), "probes %s  drops %llu  prices %s",
                  current_.probe_status.c_str(), static_cast<unsigned long long>(current_.drops),
                  current_.price_table.c_str());
    put(2, 0, line, current_.drops && colors_ ? COLOR_PAIR(3) : 0);
    if (!message_.empty())
      put(3, 0, "! " + message_, colors_ ? COLOR_PAIR(1) : A_BOLD);
    else if (editing_filter_ || !filter_.empty())
      put(3, 0, "filter: " + filter_ + (editing_filter_ ? "_  (Enter keep, Esc clear)" : ""));
    return 4;
  }

  void draw_footer(const char* keys) {
    put(LINES - 1, 0, fit(keys, static_cast<std::size_t>(COLS)), A_REVERSE);
  }

  void draw_list() {
    int y = draw_header();
    const Layout l = layout_for(COLS);
    std::string header = "  ";
    int x = 2;
    std::vector<std::pair<int, std::string>> titles;
    for (int c = 0; c < kColumnCount; ++c) {
      std::string title = column_title(static_cast<Column>(c));
      if (c == static_cast<int>(sort_)) title += descending_ ? "v" : "^";
      const bool right = c >= 2 && c <= 9;
      titles.push_back({x, fit(title, static_cast<std::size_t>(l.width[c]), right)});
      x += l.width[c] + 1;
    }
    move(y, 0);
    clrtoeol();
    for (int c = 0; c < kColumnCount; ++c)
      put(y, titles[c].first, titles[c].second,
          c == static_cast<int>(sort_) ? A_REVERSE | A_BOLD : A_BOLD | A_UNDERLINE);
    ++y;
    const auto rows = visible();
    if (selected_ >= static_cast<int>(rows.size()))
      selected_ = std::max(0, static_cast<int>(rows.size()) - 1);
    const int room = LINES - 1 - y;
    const int first = selected_ >= room ? selected_ - room + 1 : 0;
    for (int i = first; i < static_cast<int>(rows.size()) && y < LINES - 1; ++i, ++y) {
      const auto text = cells(rows[static_cast<std::size_t>(i)], l);
      std::string line = i == selected_ ? "> " : "  ";
      for (int c = 0; c < kColumnCount; ++c)
        line += fit(text[static_cast<std::size_t>(c)], static_cast<std::size_t>(l.width[c]),
                    c >= 2 && c <= 9) +
                " ";
      int attrs = i == selected_ ? A_BOLD : 0;
      if (colors_ && (rows[static_cast<std::size_t>(i)].flags & (kFlagBudget | kFlagErr)))
        attrs |= COLOR_PAIR(1);
      put(y, 0, line, attrs);
    }
    if (rows.empty())
      put(y, 2, filter_.empty() ? "(no remote reads seen yet)" : "(no client matches the filter)");
    draw_footer("q quit  </> sort  r reverse  / filter  Enter drill  p pause  h help");
  }

  void draw_drill() {
    int y = draw_header();
    const ClientRow* row = nullptr;
    for (const auto& r : rows_)
      if (r.client_id == drill_client_) row = &r;
    std::string title = "client " + drill_client_;
    if (row)
      title += "  group " + (row->group_id.empty() ? std::string("-") : row->group_id) + "  " +
               human_money(row->cost_per_hour) + "/h  cost " + human_money(row->total_cost) + "  " +
               flag_names(row->flags, ",");
    put(y++, 0, title, A_BOLD);
    put(y++, 0,
        fit("TOPIC", 16) + " PART " + fit("METHOD", 9) + fit("BYTES", 7, true) +
            fit("GETS", 7, true) + fit("ERR", 5, true) + fit("AMP", 5, true) + fit("P99", 7, true) +
            fit("COST", 9, true),
        A_BOLD | A_UNDERLINE);
    for (const auto& s : current_.sensors) {
      if (s.client_id != drill_client_ || y >= LINES / 2 + 2) continue;
      const double amp = s.delivered_bytes ? static_cast<double>(s.object_bytes) /
                                                 static_cast<double>(s.delivered_bytes)
                                           : 0;
      char ampt[16];
      std::snprintf(ampt, sizeof(ampt), "%.1f", amp);
      put(y++, 0,
          fit(s.topic, 16) + " " + fit(s.partition < 0 ? "all" : std::to_string(s.partition), 4) +
              " " + fit(s.method, 9) + fit(human_bytes(static_cast<double>(s.bytes)), 7, true) +
              fit(std::to_string(s.requests), 7, true) + fit(std::to_string(s.errors), 5, true) +
              fit(ampt, 5, true) +
              fit(human_seconds(
                      histogram_quantile(0.99, current_.latency_bounds, s.latency_buckets)),
                  7, true) +
              fit(human_money(s.cost), 9, true));
    }
    ++y;
    std::string partitions;
    std::vector<std::pair<std::string, int>> seen;
    if (recent_.is_object() && recent_.contains("reads")) {
      for (const auto& r : recent_["reads"]) {
        std::pair<std::string, int> tp{r.value("topic", ""), r.value("partition", -1)};
        if (std::find(seen.begin(), seen.end(), tp) == seen.end()) seen.push_back(tp);
      }
      for (const auto& [t, p] : seen)
        partitions += (partitions.empty() ? "" : " ") + t + "-" + std::to_string(p);
    }
    put(y++, 0,
        "partitions read recently: " + (partitions.empty() ? std::string("-") : partitions));
    put(y++, 0, "recent objects (newest first)", A_BOLD);
    if (!recent_error_.empty()) put(y++, 0, recent_error_);
    const std::size_t key_width = static_cast<std::size_t>(std::max(10, COLS - 9 - 8 - 10 - 4));
    if (recent_.is_object() && recent_.contains("reads")) {
      for (const auto& r : recent_["reads"]) {
        if (y >= LINES - 1) break;
        const std::time_t t = static_cast<std::time_t>(r.value("ts_ms", std::int64_t{0}) / 1000);
        std::tm tm{};
        localtime_r(&t, &tm);
        char clock[16];
        std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
        std::string key = r.value("object_key", "");
        // The end of a key (segment offset, file kind) tells objects apart; keep that part.
        if (key.size() > key_width) key = "~" + key.substr(key.size() - key_width + 1);
        put(y++, 0,
            std::string(clock) + " " + fit(key, key_width) + " " +
                fit(human_bytes(static_cast<double>(r.value("bytes", std::uint64_t{0}))), 7, true) +
                " " + fit(r.value("method", ""), 9) + std::to_string(r.value("status", 0)));
      }
      if (recent_["reads"].empty()) put(y++, 0, "(none in the daemon's recent-reads ring)");
    }
    draw_footer("Esc/b back  p pause  h help  q quit");
  }

  void draw_help() {
    int y = 0;
    for (const char* text : {kColumnHelp, kFlagHelp, kKeyHelp}) {
      std::string block(text);
      std::size_t start = 0;
      while (start < block.size() && y < LINES - 1) {
        const auto end = block.find('\n', start);
        put(y++, 0, block.substr(start, end - start));
        start = end == std::string::npos ? block.size() : end + 1;
      }
    }
    draw_footer("any key: back  q quit");
  }

  void draw() {
    erase();
    if (mode_ == Mode::kList)
      draw_list();
    else if (mode_ == Mode::kDrill)
      draw_drill();
    else
      draw_help();
    refresh();
  }

  Options o_;
  std::unique_ptr<Source> source_;
  TopModel model_;
  Snapshot current_;
  std::deque<Snapshot> history_;  // samples in the rate window, oldest first
  std::vector<ClientRow> rows_;
  Column sort_ = Column::kCostRate;
  bool descending_ = true;
  std::string filter_;
  bool editing_filter_ = false;
  int selected_ = 0;
  Mode mode_ = Mode::kList;
  bool paused_ = false;
  bool colors_ = false;
  double next_sample_ = 0;
  std::string message_;
  std::string drill_client_;
  nlohmann::json recent_;
  std::string recent_error_;
};

}  // namespace
}  // namespace fc::cli

void add_top_command(CLI::App& app) {
  auto o = std::make_shared<fc::cli::Options>();
  auto* cmd = app.add_subcommand(
      "top", "Remote-read cost per client, live (ncurses), or --once as a plain table");
  cmd->footer(std::string(fc::cli::kColumnHelp) + fc::cli::kFlagHelp + fc::cli::kKeyHelp);
  auto* endpoint =
      cmd->add_option("--endpoint", o->endpoint, "fetchcostd's listen URL")->capture_default_str();
  cmd->add_option("--prometheus", o->prometheus,
                  "Prometheus URL: the whole cluster via PromQL (sums over every fetchcostd)")
      ->excludes(endpoint);
  cmd->add_option("--interval", o->interval, "Seconds between samples (rates span one interval)")
      ->capture_default_str()
      ->check(CLI::Range(0.2, 3600.0));
  cmd->add_option("--window", o->window,
                  "Live view: rates span the trailing window of this many seconds (>= interval)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_flag("--once", o->once,
                "Batch mode: sample twice --interval apart, print a plain table, exit");
  cmd->add_option("-n,--count", o->count, "With --once: print this many tables, one per interval")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sort", o->sort,
                  "Sort column: client_id group_id cost_per_hour total_cost bytes_per_s gets_per_s "
                  "bytes_per_get read_amp p99_s topics flags")
      ->capture_default_str();
  cmd->add_flag("--ascending", o->ascending, "Sort ascending (default: descending)");
  cmd->add_option("--filter", o->filter,
                  "Only clients whose id, group, topic or flag contains this");
  cmd->add_flag("--no-color", o->no_color, "Monochrome (attributes only)");
  cmd->add_option("--scan-streak", o->rules.scan_streak,
                  "SCAN after remote reads in this many consecutive refreshes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--small-amp", o->rules.small_amplification,
                  "SMALL when read amplification is at least this")
      ->capture_default_str();
  cmd->callback([o] {
    const int rc =
        o->once || !isatty(STDOUT_FILENO) ? fc::cli::run_once(*o) : fc::cli::TopView(*o).run();
    if (rc != 0) std::exit(rc);
  });
}
