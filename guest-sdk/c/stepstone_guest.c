// The output buffer, the JSON member lookup and the dispatch by name that
// stepstone_steps.c and stepstone_workflows.c share.
#include "stepstone_guest.h"

#include <stdlib.h>
#include <string.h>

// Out of memory is a trap, reported by the host as `trapped` (or
// `memory-limit` when the limit refused the growth).
void *stepstone_alloc(void *ptr, size_t size) {
  void *grown = realloc(ptr, size ? size : 1);
  if (!grown) {
    abort();
  }
  return grown;
}

void stepstone_write(stepstone_output *out, const char *bytes, size_t len) {
  if (out->len + len > out->cap) {
    out->cap = (out->len + len) * 2 + 16;
    out->data = stepstone_alloc(out->data, out->cap);
  }
  memcpy(out->data + out->len, bytes, len);
  out->len += len;
}

void stepstone_print(stepstone_output *out, const char *text) { stepstone_write(out, text, strlen(text)); }

void stepstone_print_u64(stepstone_output *out, uint64_t number) {
  char digits[20];
  size_t at = sizeof digits;
  do {
    digits[--at] = (char)('0' + number % 10);
    number /= 10;
  } while (number);
  stepstone_write(out, digits + at, sizeof digits - at);
}

void stepstone_fail(stepstone_output *out, const char *message, bool permanent) {
  out->len = 0;
  out->failed = true;
  out->permanent = permanent;
  stepstone_print(out, message);
}

stepstone_input stepstone_written(const stepstone_output *out) { return (stepstone_input){out->data, out->len}; }

void stepstone_output_free(stepstone_output *out) {
  free(out->data);
  *out = (stepstone_output){0};
}

// The JSON scanners below return where what they skip ends, or NULL when
// the text ends first: they check structure only as far as they must to
// find a member, so malformed JSON yields "no such member", never a read
// past the end.

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_space(const char *at, const char *end) {
  while (at < end && is_space(*at)) {
    at++;
  }
  return at;
}

// `at` is on the opening quote.
static const char *skip_string(const char *at, const char *end) {
  for (at++; at < end; at++) {
    if (*at == '\\') {
      at++;
    } else if (*at == '"') {
      return at + 1;
    }
  }
  return NULL;
}

static const char *skip_value(const char *at, const char *end) {
  if (at >= end) {
    return NULL;
  }
  if (*at == '"') {
    return skip_string(at, end);
  }
  if (*at == '{' || *at == '[') {
    size_t depth = 0;
    while (at && at < end) {
      if (*at == '"') {
        at = skip_string(at, end);
        continue;
      }
      if (*at == '{' || *at == '[') {
        depth++;
      } else if ((*at == '}' || *at == ']') && --depth == 0) {
        return at + 1;
      }
      at++;
    }
    return NULL;
  }
  // A number, true, false or null.
  while (at < end && *at != ',' && *at != '}' && *at != ']' && !is_space(*at)) {
    at++;
  }
  return at;
}

stepstone_input stepstone_field(stepstone_input object, const char *key) {
  const stepstone_input none = {NULL, 0};
  const char *end = object.json + object.len;
  const char *at = skip_space(object.json, end);
  if (at >= end || *at != '{') {
    return none;
  }
  size_t key_len = strlen(key);
  for (at = skip_space(at + 1, end); at < end && *at == '"';) {
    const char *name = at + 1;
    const char *after_name = skip_string(at, end);
    if (!after_name) {
      return none;
    }
    bool wanted = (size_t)(after_name - 1 - name) == key_len && memcmp(name, key, key_len) == 0;
    at = skip_space(after_name, end);
    if (at >= end || *at != ':') {
      return none;
    }
    const char *value = skip_space(at + 1, end);
    const char *value_end = skip_value(value, end);
    if (!value_end) {
      return none;
    }
    if (wanted) {
      return (stepstone_input){value, (size_t)(value_end - value)};
    }
    at = skip_space(value_end, end);
    if (at >= end || *at != ',') {
      return none;
    }
    at = skip_space(at + 1, end);
  }
  return none;
}

size_t stepstone_count(const stepstone_export *table) {
  size_t count = 0;
  while (table[count].name) {
    count++;
  }
  return count;
}

void stepstone_dispatch(const stepstone_export *table, const char *what, stepstone_input name, stepstone_input input,
                        stepstone_output *out) {
  for (const stepstone_export *entry = table; entry->name; entry++) {
    if (strlen(entry->name) == name.len && memcmp(entry->name, name.json, name.len) == 0) {
      entry->run(input, out);
      return;
    }
  }
  stepstone_fail(out, "unknown ", true);
  stepstone_print(out, what);
  stepstone_print(out, " `");
  stepstone_write(out, name.json, name.len);
  stepstone_print(out, "`");
}
