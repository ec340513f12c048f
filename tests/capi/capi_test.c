/* The C API from C: include/salvo/salvo.h compiles as C11, and each entry point either works or
 * fails with a message, on SmolLM2-135M (found by name, as a binding user would ask for it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "salvo/salvo.h"

static int failures = 0;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

/* The last error mentions `fragment`. */
static void expect_error(const char* fragment, int line) {
  if (strstr(salvo_last_error(), fragment) == NULL) {
    fprintf(stderr, "line %d: error \"%s\" does not mention \"%s\"\n", line, salvo_last_error(),
            fragment);
    ++failures;
  }
}

typedef struct {
  char text[4096];
  size_t length;
  int pieces;
  int stop_after;
} Collected;

static int collect(const char* piece, size_t length, void* user) {
  Collected* c = (Collected*)user;
  if (c->length + length < sizeof(c->text)) {
    memcpy(c->text + c->length, piece, length);
    c->length += length;
    c->text[c->length] = '\0';
  }
  ++c->pieces;
  return c->stop_after == 0 || c->pieces < c->stop_after;
}

int main(void) {
  EXPECT(salvo_model_load(NULL, NULL) == NULL);
  expect_error("model", __LINE__);
  EXPECT(salvo_model_load("/no/such/file.gguf", NULL) == NULL);
  expect_error("neither a file nor a known name", __LINE__);
  salvo_model_params mp = salvo_model_default_params();
  mp.device = "tpu";
  EXPECT(salvo_model_load("smollm2-135m", &mp) == NULL);
  expect_error("device", __LINE__);

  mp = salvo_model_default_params();
  mp.threads = 2;
  salvo_model* model = salvo_model_load("smollm2-135m", &mp);
  if (model == NULL) {
    fprintf(stderr, "cannot load smollm2-135m: %s\n", salvo_last_error());
    return 1;
  }
  EXPECT(strcmp(salvo_model_architecture(model), "llama") == 0);
  EXPECT(salvo_model_n_vocab(model) == 49152);

  const char* hello = "Hello world";
  int32_t ids[8];
  EXPECT(salvo_tokenize(model, hello, strlen(hello), 1, 0, ids, 1) == 2); /* asks for room */
  EXPECT(salvo_tokenize(model, hello, strlen(hello), 1, 0, ids, 8) == 2);
  char* text = salvo_detokenize(model, ids, 2);
  EXPECT(text != NULL && strcmp(text, hello) == 0);
  salvo_string_free(text);
  int32_t bad_id = 1 << 30;
  EXPECT(salvo_detokenize(model, &bad_id, 1) == NULL);
  expect_error("outside the vocabulary", __LINE__);
  EXPECT(salvo_apply_chat_template(model, "{not json") == NULL);
  expect_error("not valid JSON", __LINE__);

  EXPECT(salvo_session_new(model, 8) == NULL);
  expect_error("context_size", __LINE__);
  salvo_session* session = salvo_session_new(model, 0);
  EXPECT(session != NULL);

  salvo_generate_params gp = salvo_generate_default_params();
  gp.temperature = 0;
  gp.max_tokens = 24;
  salvo_result result;
  Collected streamed = {0};
  EXPECT(salvo_generate(session, "Name a colour.", &gp, collect, &streamed, &result) == 0);
  EXPECT(result.n_tokens > 0 && result.n_tokens <= 24);
  EXPECT(result.stats.generated_tokens == result.n_tokens);
  EXPECT(strcmp(streamed.text, result.text) == 0 && streamed.length == result.text_len);
  EXPECT(result.stats.forward_passes > 0 && result.stats.tokens_per_pass >= 1.0);

  /* The same answer through salvo_chat, and through the ids of the rendered template. */
  salvo_result chat;
  const char* messages = "[{\"role\": \"user\", \"content\": \"Name a colour.\"}]";
  EXPECT(salvo_chat(session, messages, &gp, NULL, NULL, &chat) == 0);
  EXPECT(chat.text_len == result.text_len && memcmp(chat.text, result.text, chat.text_len) == 0);
  EXPECT(chat.stats.cached_prompt_tokens > 0); /* the same prompt again */
  salvo_result_free(&chat);
  salvo_result_free(&result);

  Collected cut = {.stop_after = 2};
  gp.max_tokens = 100;
  EXPECT(salvo_generate(session, "Count to fifty.", &gp, collect, &cut, &result) == 0);
  EXPECT(strcmp(result.stats.finish_reason, "cancelled") == 0 && result.n_tokens < 100);
  salvo_result_free(&result);

  gp.temperature = -2;
  EXPECT(salvo_generate(session, "x", &gp, NULL, NULL, &result) == -1);
  expect_error("temperature", __LINE__);
  EXPECT(result.text == NULL && result.tokens == NULL);
  gp = salvo_generate_default_params();
  gp.n_stop = 2; /* with stop NULL */
  EXPECT(salvo_generate(session, "x", &gp, NULL, NULL, &result) == -1);
  expect_error("stop", __LINE__);
  EXPECT(salvo_generate_tokens(session, ids, 0, NULL, NULL, NULL, &result) == -1);
  expect_error("empty", __LINE__);
  EXPECT(salvo_generate(NULL, "x", NULL, NULL, NULL, &result) == -1);
  expect_error("session", __LINE__);

  salvo_session_free(session);
  salvo_model_free(model);
  if (failures == 0) printf("capi_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
