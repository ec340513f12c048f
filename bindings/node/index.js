// salvo for Node.js: a model, its sessions, and generation that streams text while the event
// loop runs on. The addon (salvo.node, built beside libsalvo.so) is found through
// $SALVO_NODE_ADDON or the checkout's build tree.
'use strict';
const path = require('path');
const fs = require('fs');

function loadAddon() {
  const candidates = [];
  if (process.env.SALVO_NODE_ADDON) candidates.push(process.env.SALVO_NODE_ADDON);
  for (const preset of ['release', 'debug', 'asan']) {
    candidates.push(path.join(__dirname, '..', '..', 'build', preset, 'salvo.node'));
  }
  for (const file of candidates) {
    if (fs.existsSync(file)) return require(file);
  }
  throw new Error('cannot find salvo.node (build salvo, or set SALVO_NODE_ADDON): looked at ' +
                  candidates.join(', '));
}

const addon = loadAddon();

class Model {
  // model: a GGUF path or a known name; options: {threads, device, draftModel, drafter,
  // findDrafter}.
  constructor(model, options = {}) {
    this._native = new addon.Model(model, options);
  }
  get name() { return this._native.name(); }
  get architecture() { return this._native.architecture(); }
  get drafter() { return this._native.drafter(); }
  get nVocab() { return this._native.nVocab(); }
  tokenize(text, { addSpecial = true, parseSpecial = false } = {}) {
    return this._native.tokenize(text, addSpecial, parseSpecial);
  }
  detokenize(ids) { return this._native.detokenize(ids); }
  applyChatTemplate(messages) { return this._native.applyChatTemplate(JSON.stringify(messages)); }
  session(contextSize = 4096) { return new Session(this, contextSize); }
  close() { this._native.close(); }
}

class Session {
  constructor(model, contextSize = 4096) {
    this._native = new addon.Session(model._native, contextSize);
  }
  // prompt: a string (through the chat template unless options.raw) or token ids.
  generate(prompt, options = {}, onText = undefined) {
    const kind = typeof prompt === 'string' ? 'text' : 'tokens';
    return this._native.generate(kind, prompt, options, onText);
  }
  chat(messages, options = {}, onText = undefined) {
    return this._native.generate('chat', JSON.stringify(messages), options, onText);
  }
  // An async iterator over the answer's pieces; result() gives the whole Result once it ends.
  stream(prompt, options = {}) {
    const pieces = [];
    let wake = null;
    let finished = false;
    let failure = null;
    let stopped = false;
    const notify = () => { if (wake) { wake(); wake = null; } };
    const done = this.generate(prompt, options, (piece) => {
      pieces.push(piece);
      notify();
      return !stopped;
    }).then((r) => { finished = true; notify(); return r; },
            (e) => { finished = true; failure = e; notify(); throw e; });
    done.catch(() => {});  // observed through the iterator or result()
    return {
      result: () => done,
      [Symbol.asyncIterator]() {
        return {
          async next() {
            for (;;) {
              if (pieces.length > 0) return { value: pieces.shift(), done: false };
              if (failure) throw failure;
              if (finished) return { value: undefined, done: true };
              await new Promise((resolve) => { wake = resolve; });
            }
          },
          async return() {
            stopped = true;
            await done.catch(() => {});
            return { value: undefined, done: true };
          },
        };
      },
    };
  }
  close() { this._native.close(); }
}

module.exports = { Model, Session, version: addon.version };
