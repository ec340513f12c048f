// Types of salvo's Node binding (index.js).

export interface ModelOptions {
  /** Worker threads; 0: every core. */
  threads?: number;
  /** "cpu" (default) or "cuda". */
  device?: 'cpu' | 'cuda';
  /** A smaller GGUF with the same vocabulary that drafts. */
  draftModel?: string;
  /** A DFlash drafter directory (default: the one found for the model). */
  drafter?: string;
  findDrafter?: boolean;
}

export interface GenerateOptions {
  maxTokens?: number;
  /** 0 = greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** -1: a random seed. */
  seed?: number;
  spec?: 'auto' | 'dflash' | 'draft' | 'ngram' | 'none';
  specBudget?: number;
  specDepth?: number;
  stop?: string | string[];
  ignoreEos?: boolean;
  /** The prompt is the text: no chat template. */
  raw?: boolean;
  system?: string;
}

export interface Stats {
  promptTokens: number;
  cachedPromptTokens: number;
  generatedTokens: number;
  forwardPasses: number;
  ttftMs: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  tokensPerPass: number;
  draftedNodes: number;
  acceptedDraftTokens: number;
  draftMs: number;
  seed: number;
  peakRssBytes: number;
  peakDeviceBytes: number;
  finishReason: 'stop' | 'length' | 'cancelled';
  drafter: string;
}

export interface Result {
  text: string;
  tokens: number[];
  stats: Stats;
}

export interface Message {
  role: string;
  content: string;
}

/** Receives each piece of text; returning false stops the generation. */
export type OnText = (piece: string) => boolean | void;

export interface Stream extends AsyncIterable<string> {
  result(): Promise<Result>;
}

export class Model {
  constructor(model: string, options?: ModelOptions);
  readonly name: string;
  readonly architecture: string;
  readonly drafter: string;
  readonly nVocab: number;
  tokenize(text: string, options?: { addSpecial?: boolean; parseSpecial?: boolean }): number[];
  detokenize(ids: number[]): string;
  applyChatTemplate(messages: Message[]): string;
  session(contextSize?: number): Session;
  close(): void;
}

export class Session {
  constructor(model: Model, contextSize?: number);
  generate(prompt: string | number[], options?: GenerateOptions, onText?: OnText): Promise<Result>;
  chat(messages: Message[], options?: GenerateOptions, onText?: OnText): Promise<Result>;
  stream(prompt: string | number[], options?: GenerateOptions): Stream;
  close(): void;
}

export const version: string;
