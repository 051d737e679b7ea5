#!/usr/bin/env python3
"""Writes the tokenizer and chat-template reference fixtures in tests/fixtures/tokenizer/.

The references come from libraries nobody on this project wrote:
  * `tokenizers` (HF) for byte-level BPE: a BPE tokenizer built from the SmolLM2 GGUF's vocab,
    merges and control tokens, with the SmolLM2 pre-tokenizer (Digits(individual_digits) +
    ByteLevel) and, on the same vocabulary, the GPT-2, Llama-3 and Qwen2 pre-tokenizers;
  * `sentencepiece` for the stories260K tok512.model (llama2.c's tokenizer);
  * `jinja2` rendering the SmolLM2 chat template read from the GGUF, and the standard Llama 3 and
    Llama 2 chat templates.

Usage:
  python3 scripts/make_tokenizer_reference.py \
      --gguf .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      [--shared ../shared] [--out tests/fixtures/tokenizer]

Outputs:
  smollm2_tokenizer.json      HF tokenizer.json of SmolLM2 as `tokenizers` saves it
  smollm2_reference.json      texts -> pre-token splits and ids for 4 pre-tokenizers
  stories260k_reference.json  texts -> sentencepiece ids (tok512.model)
  tiny_bpe_tokenizer.json     a small trained byte-level BPE with lstrip/rstrip added tokens
  tiny_bpe_reference.json     texts -> ids for it
  chat_template_reference.json  templates, message lists and the jinja2 renderings
"""
import argparse
import importlib.metadata
import json
import os
import sys

import gguf
import jinja2
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

GPT2_BYTE_REGEX = None  # ByteLevel(use_regex=True) carries its own GPT-2 regex
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Text with no literal special tokens (pre-token splits are compared for these).
PLAIN_TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "two  spaces   three    four",
    "   ",
    " ",
    "",
    "a",
    "\n",
    "line one\nline two\n\nline four\n",
    "\r\nwindows\r\nlines\r\n",
    "tabs\there\t\tand\t \tmixed \t\n",
    "  \n  indented\n    more\n",
    "I'm sure you've seen they'll say he'd it's we're",
    "I'M SURE YOU'VE SEEN THEY'LL SAY HE'D IT'S WE'RE",
    "don't Don't DON'T 'tis 'S' rock'n'roll ''",
    "it'\u017f long s",
    "1234567890",
    "Call 555-1234 or +1 (800) 123-4567 at 10:30am",
    "3.14159 2,718 1e-9 0x1F 1_000_000 12345678901234567890",
    "x=1; y=22; z=333; w=4444;",
    "Arabic-Indic \u0661\u0662\u0663 roman \u216b fraction \u00bd squared x\u00b2 circled \u2460",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#top",
    "email: someone@example.com, path: C:\\Users\\me\\file.txt",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 co\u00f6perate \u00fcber Stra\u00dfe \u00c5ngstr\u00f6m",
    "e\u0301 combining acute, n\u0303 tilde, A\u030a ring",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u4e2d\u6587\u5b57\u7b26\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947",
    "emoji \U0001f600\U0001f389 family \U0001f468\u200d\U0001f469\u200d\U0001f467 flag \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "math \u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2192 \u221a(x\u00b2) = |x|",
    "nbsp\u00a0here ideographic\u3000space line\u2028sep en\u2002space",
    "zero\u200bwidth soft\u00adhyphen",
    "!!!??? ... --- *** ((( ))) [[[ ]]] {{{ }}} <<< >>>",
    "$100 \u20ac50 \u00a330 \u00a51000 50% #hashtag @mention",
    "CamelCaseWord snake_case_word kebab-case-word UPPER_CASE",
    "A\nB\r\nC\rD\n\n\nE   \n   F",
    "end with newlines\n\n",
    "word\t\n\t\nword",
    "a . b , c ; d",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    # Bytes with no token in the SmolLM2 vocabulary (0x04, 0x13, 0x14, 0xF1) are dropped.
    "a\x04b \x13\x14 x \x05\x07 plane4 \U00040000 ok",
]

# Texts with chat markup and other control tokens (encoded with special-token splitting).
SPECIAL_TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "a <|im_start|> b <|im_end|> c",
    "almost <|im_start| and <|im_end |> and <im_start|>",
    "<filename>main.py<file_sep>print('hi')<gh_stars>100",
]


def gguf_field(reader, key):
    f = reader.fields[key]
    return [f.parts[i] for i in f.data]


def gguf_strings(reader, key):
    return [bytes(p).decode("utf-8") for p in gguf_field(reader, key)]


def build_tokenizer(vocab, merges, specials, pre, ignore_merges=False):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        regex = LLAMA3_REGEX if pre == "llama3" else QWEN2_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def byte_decoder():
    # GPT-2 bytes_to_unicode, inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def smollm2_fixtures(gguf_path, out_dir, versions):
    reader = gguf.GGUFReader(gguf_path)
    tokens = gguf_strings(reader, "tokenizer.ggml.tokens")
    merges_raw = gguf_strings(reader, "tokenizer.ggml.merges")
    types = [int(p[0]) for p in gguf_field(reader, "tokenizer.ggml.token_type")]
    pre = gguf_strings(reader, "tokenizer.ggml.pre")[0]
    assert pre == "smollm", pre
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate tokens"
    merges = [tuple(m.split(" ")) for m in merges_raw]
    assert all(len(m) == 2 for m in merges)
    specials = [t for t, ty in zip(tokens, types) if ty == 3]

    tok = build_tokenizer(vocab, merges, specials, "smollm")
    json_path = os.path.join(out_dir, "smollm2_tokenizer.json")
    tok.save(json_path, pretty=False)
    size = os.path.getsize(json_path)
    print(f"{json_path}: {size} bytes", file=sys.stderr)
    if size >= 3 * 1024 * 1024:
        sys.exit(f"error: {json_path} is {size} bytes (>= 3 MB); too large for a fixture")
    # The saved file must reproduce the tokenizer it came from.
    reloaded = Tokenizer.from_file(json_path)

    variants = {
        "smollm": tok,
        "gpt2": build_tokenizer(vocab, merges, specials, "gpt2"),
        "llama3": build_tokenizer(vocab, merges, specials, "llama3", ignore_merges=True),
        "qwen2": build_tokenizer(vocab, merges, specials, "qwen2"),
    }
    dec = byte_decoder()

    def raw(piece):
        return bytes(dec[c] for c in piece).decode("utf-8")

    cases = []
    for text in PLAIN_TEXTS + SPECIAL_TEXTS:
        case = {"text": text, "ids": {}, "splits": {}}
        for name, t in variants.items():
            ids = t.encode(text, add_special_tokens=False).ids
            case["ids"][name] = ids
            if name == "smollm":
                assert reloaded.encode(text, add_special_tokens=False).ids == ids
                if "\x04" not in text:  # the dropped-bytes case cannot round-trip
                    assert t.decode(ids, skip_special_tokens=False) == text, text
            if text in PLAIN_TEXTS:
                case["splits"][name] = [raw(p) for p, _ in t.pre_tokenizer.pre_tokenize_str(text)]
        if text in SPECIAL_TEXTS:
            del case["splits"]
        cases.append(case)

    ref = {
        "generator": "scripts/make_tokenizer_reference.py",
        "versions": versions,
        "source": os.path.basename(gguf_path),
        "tokenizer_json": "smollm2_tokenizer.json",
        "note": "ids[k] = tokenizers encode(text, add_special_tokens=False) with the SmolLM2 "
                "vocab/merges/control tokens and pre-tokenizer k (llama3 with ignore_merges); "
                "splits[k] = the pre-tokenizer's pieces as text",
        "cases": cases,
    }
    with open(os.path.join(out_dir, "smollm2_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    template = gguf_strings(reader, "tokenizer.chat_template")[0]
    return template


ADDED_TOKEN_TEXTS = [
    "a <mask> b",
    "a   <mask>   b",
    "x\n\t<mask>y",
    "<mask><mask> <mask>",
    "left <sep>   right",
    "left<sep>\n\nright <sep>",
    "user: <|user|> hello <|user|>world",
    "no specials at all, just text 123",
    " <mask>",
]


def tiny_fixture(out_dir, versions):
    """A small byte-level BPE trained on PLAIN_TEXTS, with added tokens that use lstrip/rstrip
    and a non-special added token, saved with merges written as "a b" strings."""
    from tokenizers import trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(PLAIN_TEXTS * 3, trainer=trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
                            AddedToken("<sep>", lstrip=False, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<|user|>", special=False, normalized=True)])
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    text = json.dumps(data, ensure_ascii=False)
    path = os.path.join(out_dir, "tiny_bpe_tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    reloaded = Tokenizer.from_file(path)
    cases = []
    for t in ADDED_TOKEN_TEXTS + PLAIN_TEXTS:
        ids = tok.encode(t, add_special_tokens=False).ids
        assert reloaded.encode(t, add_special_tokens=False).ids == ids
        cases.append({"text": t, "ids": ids})
    ref = {
        "generator": "scripts/make_tokenizer_reference.py",
        "versions": versions,
        "tokenizer_json": "tiny_bpe_tokenizer.json",
        "note": "ids = tokenizers encode(text, add_special_tokens=False); <mask> has lstrip, "
                "<sep> rstrip, <|user|> is a non-special added token",
        "cases": cases,
    }
    with open(os.path.join(out_dir, "tiny_bpe_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")


def stories_fixture(shared, out_dir, versions):
    import sentencepiece as spm

    model = os.path.join(shared, "models", "stories260K", "tok512.model")
    sp = spm.SentencePieceProcessor(model_file=model)
    prompts = []
    with open(os.path.join(shared, "reference", "stories260K_greedy.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                prompts.append(json.loads(line)["prompt"])
    extra = [
        "Lily and Ben played in the garden. They were happy!",
        "\"Can I have the red ball?\" asked Tom.",
        "She said, 'no'.\nThen she ran home.",
        "one two three 123 4567",
        "caf\u00e9 na\u00efve",
        "\u65e5\u672c \U0001f600",
        "a  b",
        " leading",
        "trailing ",
        "tab\tnew\nline",
        "x",
        "",
    ]
    cases = []
    for text in prompts + extra:
        ids = sp.encode(text)
        # SentencePiece normalises (collapses/strips spaces); run.c does not. Ids are only
        # comparable when normalisation left the text unchanged.
        comparable = sp.decode(ids) == text
        cases.append({"text": text, "reference_prompt": text in prompts,
                      "sp_ids": ids if comparable else None})
    ref = {
        "generator": "scripts/make_tokenizer_reference.py",
        "versions": versions,
        "source": "shared/models/stories260K/tok512.model",
        "note": "sp_ids = sentencepiece encode(text) (no BOS; includes the dummy-prefix space); "
                "null when sentencepiece's normalisation changes the text",
        "cases": cases,
    }
    with open(os.path.join(out_dir, "stories260k_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")


# Standard chat templates of Meta-Llama-3-8B-Instruct and Llama-2-7b-chat-hf
# (tokenizer_config.json "chat_template").
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello there"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  spaced out \n"},
     {"role": "assistant", "content": "\nOK. "}, {"role": "user", "content": "Multi\nline\n\ntext"}],
    [{"role": "user", "content": "Unicode: caf\u00e9 \u65e5\u672c \U0001f600"}],
    [{"role": "user", "content": ""}],
    [],
]


def chat_fixture(smollm2_template, out_dir, versions):
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    templates = {"smollm2": smollm2_template, "llama3": LLAMA3_TEMPLATE, "llama2": LLAMA2_TEMPLATE}
    # The renderer leaves BOS to the tokenizer: strip the leading BOS the template writes.
    bos = {"smollm2": "", "llama3": "<|begin_of_text|>", "llama2": "<s>"}
    eos = {"smollm2": "<|im_end|>", "llama3": "<|eot_id|>", "llama2": "</s>"}
    cases = []
    for name, src in templates.items():
        tmpl = env.from_string(src)
        for messages in CONVERSATIONS:
            for gen in (True, False):
                try:
                    text = tmpl.render(messages=messages, add_generation_prompt=gen,
                                       bos_token=bos[name], eos_token=eos[name])
                except jinja2.exceptions.TemplateError:
                    text = None  # the template rejects this conversation
                if text is not None and bos[name]:
                    if text.startswith(bos[name]):
                        text = text[len(bos[name]):]
                cases.append({"template": name, "messages": messages,
                              "add_generation_prompt": gen, "expected": text})
    ref = {
        "generator": "scripts/make_tokenizer_reference.py",
        "versions": versions,
        "note": "expected = jinja2 rendering of the template (leading BOS removed); null when the "
                "template raises for the conversation",
        "templates": templates,
        "cases": cases,
    }
    with open(os.path.join(out_dir, "chat_template_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct GGUF file")
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    import sentencepiece

    versions = {"tokenizers": tokenizers.__version__, "sentencepiece": sentencepiece.__version__,
                "jinja2": jinja2.__version__, "gguf": importlib.metadata.version("gguf"),
                "python": sys.version.split()[0]}
    os.makedirs(args.out, exist_ok=True)
    template = smollm2_fixtures(args.gguf, args.out, versions)
    tiny_fixture(args.out, versions)
    stories_fixture(args.shared, args.out, versions)
    chat_fixture(template, args.out, versions)


if __name__ == "__main__":
    main()
