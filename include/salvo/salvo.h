/* salvo's C API: load a GGUF model, tokenize, and generate text with speculative decoding, from
 * any language that can call C (the Python, Node/TypeScript and Swift bindings are built on it).
 *
 * Errors: a function that fails returns NULL or a negative number and leaves a message saying
 * what was wrong in salvo_last_error() (per thread). Nothing here aborts the process on bad input.
 *
 * Threads: a model may be used from several threads; its generations run one at a time (a
 * second caller waits), because they share the model's worker threads. A session belongs to
 * one conversation: its KV cache keeps the previous turn, so the next prompt that extends it
 * reuses the cached prefix. */
#ifndef SALVO_SALVO_H
#define SALVO_SALVO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SALVO_API_VERSION 1

typedef struct salvo_model salvo_model;
typedef struct salvo_session salvo_session;

typedef struct salvo_model_params {
  int32_t threads;         /* worker threads; 0: every core */
  const char* device;      /* "cpu" (NULL means cpu) or "cuda" (a CUDA build and a GPU) */
  const char* draft_model; /* a smaller GGUF with the same vocabulary that drafts; NULL: none */
  const char* drafter;     /* a DFlash drafter directory; NULL: the one found for the model */
  int32_t find_drafter;    /* 1: look for drafters/<model>/ when `drafter` is NULL */
} salvo_model_params;

typedef struct salvo_generate_params {
  int32_t max_tokens;     /* 256 */
  float temperature;      /* 0.8; 0 = greedy */
  int32_t top_k;          /* 40; 0 = off */
  float top_p;            /* 0.95; 1 = off */
  float min_p;            /* 0.05; 0 = off */
  float repeat_penalty;   /* 1 = off */
  float presence_penalty; /* 0 */
  float frequency_penalty;
  int64_t seed;            /* -1: a random seed (the result's stats say which) */
  const char* spec;        /* "auto" (NULL), "dflash", "draft", "ngram" or "none" */
  int32_t spec_budget;     /* draft tree nodes per pass; -1: the drafter's */
  int32_t spec_depth;      /* deepest draft node; -1: the drafter's */
  const char* const* stop; /* stop strings, `n_stop` of them */
  int32_t n_stop;
  int32_t ignore_eos; /* 1: keep generating after end-of-generation tokens */
  int32_t raw;        /* salvo_generate: 1 = the prompt is the text, no chat template */
  const char* system; /* salvo_generate in chat mode: a system message, or NULL */
} salvo_generate_params;

typedef struct salvo_stats {
  int32_t prompt_tokens;
  int32_t cached_prompt_tokens; /* reused from the session's previous turn */
  int32_t generated_tokens;
  int32_t forward_passes;
  double ttft_ms; /* time to first token */
  double prefill_tokens_per_second;
  double decode_tokens_per_second;
  double tokens_per_pass; /* generated tokens per forward pass */
  int32_t drafted_nodes;  /* draft tokens verified */
  int32_t accepted_draft_tokens;
  double draft_ms; /* time in the drafter */
  uint64_t seed;   /* the sampler's seed */
  size_t peak_rss_bytes;
  size_t peak_device_bytes;
  char finish_reason[16]; /* "stop", "length" or "cancelled" */
  char drafter[48];       /* what drafted ("" for plain decoding) */
} salvo_stats;

typedef struct salvo_result {
  char* text;      /* the generated text, NUL-terminated (stop strings removed) */
  size_t text_len; /* its bytes (the text may hold NUL bytes) */
  int32_t* tokens; /* the generated token ids */
  int32_t n_tokens;
  salvo_stats stats;
} salvo_result;

/* Receives each new piece of text as it is generated (`length` bytes, not NUL-terminated).
 * Return nonzero to go on, 0 to stop the generation (finish reason "cancelled"). */
typedef int (*salvo_text_callback)(const char* piece, size_t length, void* user_data);

const char* salvo_version(void);
/* The message of the last call that failed on this thread ("" if none). */
const char* salvo_last_error(void);

salvo_model_params salvo_model_default_params(void);
salvo_generate_params salvo_generate_default_params(void);

/* `model`: a GGUF path, or a known name (smollm2-135m, qwen2.5-coder-1.5b, ...) looked up in
 * $SALVO_MODELS and fetched when missing. `params` may be NULL for the defaults. */
salvo_model* salvo_model_load(const char* model, const salvo_model_params* params);
void salvo_model_free(salvo_model* model);
/* Static strings owned by the model. */
const char* salvo_model_name(const salvo_model* model);
const char* salvo_model_architecture(const salvo_model* model);
/* The DFlash drafter's directory, "" when the model has none. */
const char* salvo_model_drafter(const salvo_model* model);
int32_t salvo_model_n_vocab(const salvo_model* model);

/* Writes at most `capacity` ids to `ids` and returns how many the text has (call again with
 * that capacity when it is larger); -1 on error. parse_special: "<|im_end|>" and the like in
 * the text become their special ids. */
int32_t salvo_tokenize(const salvo_model* model, const char* text, size_t text_len,
                       int32_t add_special, int32_t parse_special, int32_t* ids, int32_t capacity);
/* The text of `ids` (free it with salvo_string_free), or NULL for an id out of range. */
char* salvo_detokenize(const salvo_model* model, const int32_t* ids, int32_t n_ids);
/* The model's chat template applied to `messages_json` (a JSON array of {"role", "content"}),
 * with the generation prompt: the text a chat prompt is tokenized from. Free with
 * salvo_string_free. */
char* salvo_apply_chat_template(const salvo_model* model, const char* messages_json);
void salvo_string_free(char* text);

/* A conversation of at most `context_size` tokens (0: 4096). The model must outlive it. */
salvo_session* salvo_session_new(salvo_model* model, int32_t context_size);
void salvo_session_free(salvo_session* session);

/* Generates an answer to `prompt` (through the chat template unless params->raw), streaming
 * pieces to `on_text` (may be NULL). Fills `result` (free it with salvo_result_free) and
 * returns 0, or returns -1 with salvo_last_error() set and `result` empty. */
int salvo_generate(salvo_session* session, const char* prompt, const salvo_generate_params* params,
                   salvo_text_callback on_text, void* user_data, salvo_result* result);
/* The same for a conversation: `messages_json` is a JSON array of {"role", "content"}. */
int salvo_chat(salvo_session* session, const char* messages_json,
               const salvo_generate_params* params, salvo_text_callback on_text, void* user_data,
               salvo_result* result);
/* The same for a prompt given as token ids (no template, nothing added). */
int salvo_generate_tokens(salvo_session* session, const int32_t* prompt, int32_t n_prompt,
                          const salvo_generate_params* params, salvo_text_callback on_text,
                          void* user_data, salvo_result* result);
void salvo_result_free(salvo_result* result);

#ifdef __cplusplus
}
#endif

#endif /* SALVO_SALVO_H */
