// The Node binding's checks, compiled by tsc and run by tests/python/test_bindings.py, which also
// compares the greedy ids this prints against llama.cpp's. Environment: SALVO_NODE_BINDING (the
// binding's index.js), SALVO_TEST_MODEL (a GGUF path), SALVO_TEST_PROMPTS (a JSON array of raw
// prompts). Prints one JSON line: {"greedy": [{"prompt", "prompt_tokens", "tokens"}], "checks": n}.
import type * as SalvoTypes from '../index';

declare const require: (id: string) => any;
declare const process: { env: Record<string, string | undefined>; exitCode?: number };

const salvo: typeof SalvoTypes = require(process.env.SALVO_NODE_BINDING as string);
const assert = require('assert');

let checks = 0;
function check(condition: boolean, what: string): void {
  assert.ok(condition, what);
  checks += 1;
}

async function rejects(run: () => Promise<unknown>, pattern: RegExp, what: string): Promise<void> {
  try {
    await run();
  } catch (e) {
    check(pattern.test(String((e as Error).message)), `${what}: message "${(e as Error).message}"`);
    return;
  }
  assert.fail(`${what}: no error`);
}

function throws(run: () => unknown, pattern: RegExp, what: string): void {
  try {
    run();
  } catch (e) {
    check(pattern.test(String((e as Error).message)), `${what}: message "${(e as Error).message}"`);
    return;
  }
  assert.fail(`${what}: no error`);
}

async function main(): Promise<void> {
  const modelPath = process.env.SALVO_TEST_MODEL as string;
  const prompts: string[] = JSON.parse(process.env.SALVO_TEST_PROMPTS as string);
  const model = new salvo.Model(modelPath, { threads: 2 });
  check(model.nVocab > 0 && model.architecture.length > 0, 'model facts');

  // Greedy raw continuations, drafted as --spec auto does: llama.cpp's ids are the reference.
  const session = model.session(2048);
  const greedy = [];
  for (const prompt of prompts) {
    const ids = model.tokenize(prompt);
    const r = await session.generate(prompt, { raw: true, temperature: 0, maxTokens: 64 });
    check(r.tokens.length > 0 && r.stats.generatedTokens === r.tokens.length, 'token counts');
    greedy.push({ prompt, prompt_tokens: ids, tokens: r.tokens });
  }

  // Streaming gives the result's text piece by piece, with the event loop free meanwhile.
  const pieces: string[] = [];
  let ticks = 0;
  const timer = setInterval(() => { ticks += 1; }, 1);
  const streamed = await session.generate('Tell me about the sea.', { temperature: 0, maxTokens: 48 },
                                          (piece) => { pieces.push(piece); });
  clearInterval(timer);
  check(pieces.join('') === streamed.text && pieces.length > 1, 'streamed pieces make the text');
  check(ticks > 0, 'the event loop ran during generation');

  const iterated: string[] = [];
  const stream = session.stream('Tell me about the sea.', { temperature: 0, maxTokens: 48 });
  for await (const piece of stream) iterated.push(piece);
  check(iterated.join('') === streamed.text, 'the async iterator gives the same text');
  check((await stream.result()).stats.cachedPromptTokens > 0, 'the repeated prompt is cached');

  // onText returning false stops the generation.
  let seen = 0;
  const cut = await session.generate('Count from 1 to 100.', { temperature: 0, maxTokens: 200 },
                                     () => { seen += 1; return seen < 3; });
  check(cut.stats.finishReason === 'cancelled' && cut.tokens.length < 200, 'cancelled by onText');

  // A chat, and a prompt of token ids, go through the same path.
  const messages = [{ role: 'user', content: 'Say hi.' }];
  const chat = await session.chat(messages, { temperature: 0, maxTokens: 8 });
  const text = model.applyChatTemplate(messages);
  const byIds = await session.generate(model.tokenize(text, { parseSpecial: true }),
                                       { temperature: 0, maxTokens: 8 });
  check(byIds.text === chat.text, 'chat equals its template rendered and tokenized');

  // The same seed gives the same sampled text with and without speculation.
  const sampled = { temperature: 0.9, seed: 7, maxTokens: 40 };
  const plain = await session.generate('Write a limerick.', { ...sampled, spec: 'none' });
  const drafted = await session.generate('Write a limerick.', { ...sampled, spec: 'auto' });
  check(plain.text === drafted.text, 'speculation leaves a seeded text unchanged');

  // Bad input is an error that says what was wrong, never a crash.
  throws(() => new salvo.Model('/no/such/model.gguf'), /neither a file nor a known name/, 'missing model');
  throws(() => new salvo.Model(modelPath, { device: 'tpu' as any }), /device/, 'bad device');
  await rejects(() => session.generate('x', { temperature: -1 }), /temperature/, 'bad temperature');
  await rejects(() => session.generate('x', { spec: 'fast' as any }), /fast/, 'bad spec mode');
  throws(() => session.generate('x', { maxTokenz: 5 } as any), /unknown generation option 'maxTokenz'/,
         'misspelt option');
  throws(() => session.generate('x', { topK: 1.5 }), /topK/, 'fractional topK');
  await rejects(() => session.generate([1, 2, 1 << 30], {}), /outside the vocabulary/, 'bad prompt id');
  await rejects(() => session.chat([{ role: 'user' } as any], {}), /content/, 'message without content');
  throws(() => model.detokenize([-5]), /outside the vocabulary/, 'bad id to detokenize');
  const small = model.session(16);
  await rejects(() => small.generate('word '.repeat(40), { raw: true, maxTokens: 4 }), /context/,
                'a prompt longer than the context');
  const busy = session.generate('Hello', { maxTokens: 4 });
  throws(() => session.generate('Hello', {}), /already generating/, 'one generation at a time');
  await busy;
  throws(() => model.close(), /sessions first/, 'the model outlives its sessions');
  small.close();
  session.close();
  throws(() => session.generate('x', {}), /closed/, 'a closed session');
  model.close();
  throws(() => model.nVocab, /closed/, 'a closed model');

  console.log(JSON.stringify({ greedy, checks }));
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
