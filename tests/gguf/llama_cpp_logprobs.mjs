// llama.cpp itself (node-llama-cpp's prebuilt CPU binary) on a GGUF file.
//   node llama_cpp_logprobs.mjs MODEL.gguf '[id, ...]'   the log-probabilities of the next token after
//       every position of the ids, one JSON array (the whole vocabulary) per position;
//   node llama_cpp_logprobs.mjs MODEL.gguf --tokenize LINES   llama.cpp's ids of each line of the file
//       (special tokens in the text recognised, no BOS added), one JSON array per line.
// The KV cache is float32 and flash attention is off (llama.cpp's defaults, a float16 cache and
// its CPU flash-attention kernel, round the keys, values and scores the test compares, to about
// 1e-3 of the largest logit), and no sampling option is given, so each distribution is the softmax
// of llama.cpp's raw logits. What the file says of itself goes to stderr as JSON: llama.cpp's release, the
// architecture, the number of tokens, the chat template.
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel, readGgufFileInfo} from "node-llama-cpp";

const [modelPath, arg, linesPath] = process.argv.slice(2);
const info = await readGgufFileInfo(modelPath);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
console.error(JSON.stringify({llama_cpp: llama.llamaCppRelease.release, architecture: info.metadata.general.architecture,
                              tokens: info.metadata.tokenizer?.ggml?.tokens?.length,
                              tokenizer: info.metadata.tokenizer?.ggml?.model,
                              chat_template: info.metadata.tokenizer?.chat_template ?? ""}));
if (arg === "--tokenize") {
    const lines = readFileSync(linesPath, "utf8").split("\n").filter((l) => l.length > 0);
    process.stdout.write(lines.map((l) => JSON.stringify(model.tokenize(l, true))).join("\n") + "\n");
} else {
    const ids = JSON.parse(arg);
    const context = await model.createContext({contextSize: Math.max(64, ids.length + 8), sequences: 1,
                                               experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
                                               flashAttention: false});
    const out = await context.getSequence().controlledEvaluate(ids.map((id) => [id, {generateNext: {probabilities: true}}]));
    const rows = out.map((o) => {
        const logprobs = [];
        for (const [token, p] of o.next.probabilities) logprobs[token] = Math.log(p);
        return Array.from(logprobs, (x) => (x === undefined || !Number.isFinite(x) ? null : x));
    });
    process.stdout.write(JSON.stringify(rows) + "\n");
    await context.dispose();
}
await model.dispose();
await llama.dispose();
