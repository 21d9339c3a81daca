// Hugging Face's JavaScript tokenizers on the lines of a file: one JSON array of ids per line.
// usage: node reference.mjs tokenizer.json tokenizer_config.json lines.txt [--bench N | --json-lines]
// (--json-lines: each line is a JSON string, which may hold newlines)
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, configPath, linesPath, flag, repeat] = process.argv.slice(2);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), JSON.parse(readFileSync(configPath, "utf8")));
// Lines are cut on '\n' as bytes, then each is decoded as UTF-8 (invalid bytes become U+FFFD).
const bytes = readFileSync(linesPath);
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });  // a leading U+FEFF is text here
const lines = [];
let start = 0;
for (let i = 0; i < bytes.length; ++i) {
  if (bytes[i] === 0x0a) {
    lines.push(decoder.decode(bytes.subarray(start, i)));
    start = i + 1;
  }
}
if (start < bytes.length) lines.push(decoder.decode(bytes.subarray(start)));
if (flag === "--json-lines") lines.forEach((line, i) => { lines[i] = JSON.parse(line); });

if (flag === "--bench") {
  let tokens = 0;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < Number(repeat); ++r)
    for (const line of lines) tokens += tokenizer.encode(line, { add_special_tokens: false }).ids.length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ tokens, seconds, tokens_per_second: tokens / seconds }));
} else {
  const out = lines.map((line) => JSON.stringify(tokenizer.encode(line, { add_special_tokens: false }).ids)).join("\n");
  process.stdout.write(out + (lines.length ? "\n" : ""));
}
