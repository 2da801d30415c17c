// compile_log.cpp — what mini tells about its compiles: the MINI_LOGS channels, the
// MINI_COMPILE_DEBUG files, and the events explain() reads (compile_log.h).
#include "capture/compile_log.h"

#include <Python.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "tensor/errors.h"

namespace mini::capture {

LogChannels& log_channels() {
  static LogChannels l;
  return l;
}
std::deque<CompileEvent>& compile_events() {
  static std::deque<CompileEvent> v;
  return v;
}
std::deque<BreakEvent>& break_events() {
  static std::deque<BreakEvent> v;
  return v;
}

namespace {
size_t g_dropped_events = 0;
size_t g_break_count = 0;  // debug files of graph breaks written since the reset

template <class Event>
void record_event(std::deque<Event>& log, Event event) {
  if (log.size() >= kMaxEvents) {
    log.pop_front();
    g_dropped_events++;
  }
  log.push_back(std::move(event));
}
}  // namespace

size_t dropped_events() { return g_dropped_events; }

void clear_events() {
  compile_events().clear();
  break_events().clear();
  g_dropped_events = 0;
  g_break_count = 0;
}

void record_compile(CompileEvent event) { record_event(compile_events(), std::move(event)); }

void record_break(BreakEvent event) { record_event(break_events(), std::move(event)); }

size_t next_break_file() { return ++g_break_count; }

void log_write(const std::string& text) {
  PyObject* err = PySys_GetObject("stderr");  // Borrowed
  if (!err || err == Py_None) return;
  PyObject* s = PyUnicode_FromString((text + (text.empty() || text.back() != '\n' ? "\n" : "")).c_str());
  if (s) {
    PyFile_WriteObject(s, err, Py_PRINT_RAW);
    Py_DECREF(s);
  }
  PyErr_Clear();
}

void warn_user(const std::string& text) {
  if (PyErr_WarnEx(PyExc_UserWarning, text.c_str(), 1) == 0) return;
  PyObject *type, *value, *traceback;  // warnings are errors here: that error, as a mini::Error
  PyErr_Fetch(&type, &value, &traceback);
  std::string what = text;
  if (PyObject* s = value ? PyObject_Str(value) : nullptr) {
    if (const char* c = PyUnicode_AsUTF8(s)) what = std::string(((PyTypeObject*)type)->tp_name) + ": " + c;
    Py_DECREF(s);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  throw Error(Error::Kind::Runtime, what);
}

namespace {
// MINI_COMPILE_DEBUG read once: on, and the warning an unrecognised value gets ("" if none).
struct DebugSetting {
  bool on = false;
  std::string warning;
};
const DebugSetting& debug_setting() {
  static const DebugSetting setting = [] {
    DebugSetting d;
    const char* env = std::getenv("MINI_COMPILE_DEBUG");
    std::string v = env ? env : "";
    for (char& c : v) c = (char)std::tolower((unsigned char)c);
    d.on = v == "1" || v == "true" || v == "yes" || v == "on";
    if (!d.on && !v.empty() && v != "0" && v != "false" && v != "no" && v != "off")
      d.warning = cat("MINI_COMPILE_DEBUG='", env, "' is not understood: 1, true, yes or on write the debug files, "
                      "0, false, no, off or empty do not. It is taken as off.");
    return d;
  }();
  return setting;
}
}  // namespace

bool compile_debug() { return debug_setting().on; }
const std::string& compile_debug_warning() { return debug_setting().warning; }

void debug_write(const std::string& title, const std::string& name, const std::string& text) {
  if (!compile_debug()) return;
  // ./mini_compile_debug, or the temporary folder's when the working folder is gone (removed
  // under the process) or unreadable, said once
  static const std::filesystem::path run = [] {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", std::localtime(&now));
    std::error_code ec;
    std::filesystem::path base = std::filesystem::current_path(ec);
    if (ec) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
      log_write("MINI_COMPILE_DEBUG: the working folder cannot be read (" + ec.message() + "); the debug files go to " +
                (base / "mini_compile_debug").string() + " instead");
    }
    return base / "mini_compile_debug" / ("run_" + std::string(stamp) + "-pid_" + std::to_string(getpid()));
  }();
  std::error_code ec;
  std::filesystem::create_directories(run / title, ec);
  std::ofstream out(run / title / name);
  out << text;
  if (ec || !out) log_write("MINI_COMPILE_DEBUG: could not write " + (run / title / name).string());
}

}  // namespace mini::capture
