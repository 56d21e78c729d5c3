#include "cli/main_entry.h"

#include <cxxabi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <typeinfo>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_message.h"
#include "core/log.h"

namespace {

std::string type_name_of(const std::exception& e) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : typeid(e).name();
  std::free(demangled);
  return name;
}

int internal_error(const char* file, int line, const std::string& what) {
  std::fprintf(stderr,
               "shardtrain: internal error at %s:%d: %s; this is a bug, please report it with "
               "the command line\n",
               file, line, what.c_str());
  return 1;
}

}  // namespace

namespace shardtrain::cli {

int run_main(int argc, char** argv, const std::function<WorkerHooks()>& hooks) {
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported like a full disk,
  // instead of killing the process half-way through a save.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    log::check_level_env();
    return run(argc, argv, hooks ? hooks() : WorkerHooks{});
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "shardtrain: error: %s\n", e.what());
    return 2;
  } catch (const nlohmann::json::type_error& e) {
    // 316: a string handed to the JSON writer (an argument, a file's text) is not UTF-8: the
    // user's input, not a bug. Any other type error is one.
    if (e.id != 316) {
      return internal_error(__FILE__, __LINE__,
                            "uncaught " + type_name_of(e) + ": " + shardtrain::json_message(e));
    }
    std::fprintf(stderr,
                 "shardtrain: error: an argument or input is not valid UTF-8 (%s); HINT: pass "
                 "UTF-8 text\n",
                 shardtrain::json_message(e).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "shardtrain: error: out of memory; HINT: the model, batch or data is too large "
                 "for this machine (`shardtrain plan` estimates what a config needs)\n");
    return 2;
  } catch (const std::exception& e) {
    return internal_error(__FILE__, __LINE__,
                          "uncaught " + type_name_of(e) + ": " + shardtrain::json_message(e));
  } catch (...) {
    return internal_error(__FILE__, __LINE__, "uncaught exception of unknown type");
  }
}

}  // namespace shardtrain::cli
