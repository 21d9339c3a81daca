// llama.cpp itself (node-llama-cpp's prebuilt CPU binary) on GGUF files, several in one process
// (its start costs seconds):
//   node llama_cpp_logprobs.mjs --ids '[id, ...]' MODEL.gguf=OUT ...   for each model, OUT.json: the
//       log-probabilities of the next token after every position of the ids, one JSON array (the
//       whole vocabulary) per position;
//   node llama_cpp_logprobs.mjs --tokenize LINES MODEL.gguf=OUT ...     OUT.json: llama.cpp's ids of
//       each line of the file (special tokens in the text recognised, no BOS added), an array a line;
// and OUT.meta: what the file says of itself (llama.cpp's release, the architecture, the number of
// tokens, the tokenizer model, the chat template), as JSON.
// The KV cache is float32 and flash attention is off (llama.cpp's defaults, a float16 cache and
// its CPU flash-attention kernel, round the keys, values and scores the test compares, to about
// 1e-3 of the largest logit), and no sampling option is given, so each distribution is the softmax
// of llama.cpp's raw logits.
import {readFileSync, writeFileSync} from "node:fs";
import {getLlama, LlamaLogLevel, readGgufFileInfo} from "node-llama-cpp";

const [mode, arg, ...pairs] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error});
for (const pair of pairs) {
    const [modelPath, out] = pair.split("=");
    const info = await readGgufFileInfo(modelPath);
    writeFileSync(out + ".meta", JSON.stringify({
        llama_cpp: llama.llamaCppRelease.release, architecture: info.metadata.general.architecture,
        tokens: info.metadata.tokenizer?.ggml?.tokens?.length, tokenizer: info.metadata.tokenizer?.ggml?.model,
        chat_template: info.metadata.tokenizer?.chat_template ?? ""}) + "\n");
    const model = await llama.loadModel({modelPath, gpuLayers: 0});
    if (mode === "--tokenize") {
        const lines = readFileSync(arg, "utf8").split("\n").filter((l) => l.length > 0);
        writeFileSync(out + ".json", lines.map((l) => JSON.stringify(model.tokenize(l, true))).join("\n") + "\n");
    } else {
        const ids = JSON.parse(arg);
        const context = await model.createContext({contextSize: Math.max(64, ids.length + 8), sequences: 1,
                                                   experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
                                                   flashAttention: false});
        const evaluated = await context.getSequence().controlledEvaluate(
            ids.map((id) => [id, {generateNext: {probabilities: true}}]));
        const rows = evaluated.map((o) => {
            const logprobs = [];
            for (const [token, p] of o.next.probabilities) logprobs[token] = Math.log(p);
            return Array.from(logprobs, (x) => (x === undefined || !Number.isFinite(x) ? null : x));
        });
        writeFileSync(out + ".json", JSON.stringify(rows) + "\n");
        await context.dispose();
    }
    await model.dispose();
}
await llama.dispose();
