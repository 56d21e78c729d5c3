// shardtrain entry point: dispatches to subcommands (cli/commands.h) and turns every exception
// into one line on stderr:
//   shardtrain::Error (a user mistake: file, key, flag, peer)  -> "error: ...", exit 2
//   std::bad_alloc (a job too large for this machine's memory) -> "error: out of memory", exit 2
//   anything else (a bug: no user input may reach it)          -> "internal error at FILE:LINE"
//                                                                  with the exception's type, exit
//                                                                  1
// Nothing escapes main, so no input ends in std::terminate / abort (rc 134).
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <typeinfo>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_message.h"

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

int main(int argc, char** argv) {
  try {
    return shardtrain::cli::run(argc, argv);
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "shardtrain: error: %s\n", e.what());
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
