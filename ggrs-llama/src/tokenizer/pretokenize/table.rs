//! llama.cpp's pre-tokenizers as data: for each `tokenizer.ggml.pre` name, llama.cpp's list
//! of regular expressions (its `src/llama-vocab.cpp`, the `regex_exprs` of each
//! `LLAMA_VOCAB_PRE_TYPE_*`) and the flags that name sets there.
//!
//! The expressions are written exactly as llama.cpp's (after C escapes: `"[\r\n]"` holds a
//! real carriage return and line feed, as there), since the strings with a hand-written
//! scanner are recognised by their text, as llama.cpp recognises its own.

use std::sync::OnceLock;

use super::Stage;

/// One of llama.cpp's expression lists, applied in turn (each expression cuts every piece
/// the previous one left), compiled on first use.
#[derive(Debug)]
pub(crate) struct Expressions {
    /// The expressions.
    pub list: &'static [&'static str],
    /// Words are written with GPT-2's byte map before merging (false: raw UTF-8, for
    /// SentencePiece-style BPE vocabularies).
    pub byte_encode: bool,
    /// The compiled stages, or why one expression cannot run exactly.
    pub(super) compiled: OnceLock<Result<Vec<Stage>, String>>,
}

impl Expressions {
    const fn new(list: &'static [&'static str], byte_encode: bool) -> Expressions {
        Expressions {
            list,
            byte_encode,
            compiled: OnceLock::new(),
        }
    }
}

/// How a `tokenizer.ggml.pre` name configures the BPE tokenizer, as llama.cpp does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreConfig {
    /// The splitting rules.
    pub exprs: &'static Expressions,
    /// A word that is already a token is emitted whole, without merges (LLaMA 3).
    pub ignore_merges: bool,
    /// The default of `add_bos_token` when the file does not set it.
    pub add_bos: bool,
    /// Detokenizing removes spaces before punctuation (`clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
    /// The model has no BOS token unless the file names one (ChatGLM 4).
    pub no_default_bos: bool,
    /// Spaces are written as `▁` before tokenizing, and back when decoding
    /// (SentencePiece-style BPE: Gemma 4).
    pub escape_whitespaces: bool,
    /// llama.cpp's two workarounds for its Gemma 4 pre-type: BOS is added even when the file
    /// says `add_bos_token = false`, and a word of line feeds that is a token is taken whole.
    pub gemma4: bool,
}

/// A name using `exprs` with llama.cpp's defaults for BPE: merges always applied, no BOS
/// added, spaces cleaned up when decoding.
const fn pre(exprs: &'static Expressions) -> PreConfig {
    PreConfig {
        exprs,
        ignore_merges: false,
        add_bos: false,
        clean_spaces: true,
        no_default_bos: false,
        escape_whitespaces: false,
        gemma4: false,
    }
}

impl PreConfig {
    const fn ignore_merges(self) -> PreConfig {
        PreConfig {
            ignore_merges: true,
            ..self
        }
    }

    const fn add_bos(self) -> PreConfig {
        PreConfig {
            add_bos: true,
            ..self
        }
    }

    /// `clean_spaces = false`.
    const fn keep_spaces(self) -> PreConfig {
        PreConfig {
            clean_spaces: false,
            ..self
        }
    }

    const fn no_default_bos(self) -> PreConfig {
        PreConfig {
            no_default_bos: true,
            ..self
        }
    }

    const fn escape_whitespaces(self) -> PreConfig {
        PreConfig {
            escape_whitespaces: true,
            ..self
        }
    }

    const fn gemma4(self) -> PreConfig {
        PreConfig {
            gemma4: true,
            ..self
        }
    }
}

/// Every `tokenizer.ggml.pre` name llama.cpp knows, with its configuration; a file without
/// the key gets `default`. To add a pre-tokenizer, add its name here, with one of the lists
/// below or a new one copied from llama.cpp.
pub(crate) static PRE_TOKENIZERS: &[(&str, PreConfig)] = &[
    ("default", pre(&DEFAULT)),
    ("minicpm5", pre(&MINICPM5).ignore_merges()),
    ("llama3", pre(&LLAMA3).ignore_merges().add_bos()),
    ("llama-v3", pre(&LLAMA3).ignore_merges().add_bos()),
    ("llama-bpe", pre(&LLAMA3).ignore_merges().add_bos()),
    ("falcon3", pre(&LLAMA3).ignore_merges().add_bos()),
    ("falcon-h1", pre(&LLAMA3).ignore_merges().add_bos()),
    ("pixtral", pre(&LLAMA3).ignore_merges().add_bos()),
    ("midm-2.0", pre(&LLAMA3).ignore_merges().add_bos()),
    ("lfm2", pre(&LLAMA3).ignore_merges().add_bos()),
    ("jina-v5-nano", pre(&LLAMA3).ignore_merges().add_bos()),
    ("deepseek-llm", pre(&DEEPSEEK_LLM).keep_spaces()),
    ("deepseek-coder", pre(&DEEPSEEK_CODER).keep_spaces()),
    ("deepseek-v3", pre(&DEEPSEEK3_LLM).keep_spaces()),
    ("spark2_5", pre(&SPARK2_5).keep_spaces()),
    ("youtu", pre(&YOUTU).keep_spaces().ignore_merges()),
    ("falcon", pre(&FALCON)),
    ("mpt", pre(&GPT2)),
    ("starcoder", pre(&STARCODER)),
    ("gpt-2", pre(&GPT2)),
    ("phi-2", pre(&GPT2)),
    ("jina-es", pre(&GPT2)),
    ("jina-de", pre(&GPT2)),
    ("gigachat", pre(&GPT2)),
    ("jina-v2-es", pre(&GPT2)),
    ("jina-v2-de", pre(&GPT2)),
    ("a.x-4.0", pre(&GPT2)),
    ("mellum", pre(&GPT2)),
    ("modern-bert", pre(&GPT2)),
    ("jais-2", pre(&JAIS2)),
    ("gemma4", pre(&GEMMA4).escape_whitespaces().gemma4()),
    (
        "granite-embed-multi-311m",
        pre(&GEMMA4).escape_whitespaces().gemma4(),
    ),
    (
        "sarvam-moe",
        pre(&GEMMA4).escape_whitespaces().keep_spaces(),
    ),
    // These three also set llama.cpp's `add_sep`, which only its embedding tools read.
    ("jina-v1-en", pre(&GPT2)),
    ("jina-v2-code", pre(&GPT2)),
    ("roberta-bpe", pre(&GPT2)),
    ("whitespace", pre(&WHITESPACE)),
    ("refact", pre(&STARCODER)),
    ("command-r", pre(&STARCODER).keep_spaces()),
    ("qwen2", pre(&QWEN2).keep_spaces()),
    ("deepseek-r1-qwen", pre(&QWEN2).keep_spaces()),
    ("kormo", pre(&QWEN2).keep_spaces()),
    ("f2llmv2", pre(&QWEN2).keep_spaces()),
    ("qwen35", pre(&QWEN35).keep_spaces()),
    ("stablelm2", pre(&QWEN2)),
    ("olmo", pre(&GPT2)),
    ("dbrx", pre(&LLAMA3)),
    ("smaug-bpe", pre(&LLAMA3)),
    ("poro-chat", pre(&PORO).keep_spaces()),
    ("chatglm-bpe", pre(&LLAMA3).no_default_bos()),
    ("glm4", pre(&LLAMA3).no_default_bos().ignore_merges()),
    ("glm5", pre(&LLAMA3).no_default_bos().ignore_merges()),
    ("viking", pre(&VIKING).keep_spaces()),
    ("jais", pre(&GPT2)),
    (
        "tekken",
        pre(&TEKKEN).keep_spaces().ignore_merges().add_bos(),
    ),
    ("smollm", pre(&STARCODER).keep_spaces()),
    ("codeshell", pre(&STARCODER)),
    ("bloom", pre(&PORO)),
    ("gpt3-finnish", pre(&PORO)),
    ("exaone", pre(&STARCODER)),
    ("exaone4", pre(&GPT2)),
    ("exaone-moe", pre(&EXAONE_MOE)),
    ("chameleon", pre(&CHAMELEON).add_bos().keep_spaces()),
    ("minerva-7b", pre(&STARCODER)),
    ("megrez", pre(&QWEN2)),
    ("gpt-4o", pre(&GPT4O).keep_spaces()),
    ("llama4", pre(&GPT4O).keep_spaces()),
    ("kanana2", pre(&GPT4O).keep_spaces()),
    ("talkie", pre(&GPT4O).keep_spaces()),
    (
        "granite-embed-multi-97m",
        pre(&GRANITE_EMB_MULTI).keep_spaces().ignore_merges(),
    ),
    ("tiny_aya", pre(&TINY_AYA).keep_spaces()),
    ("cohere2moe", pre(&TINY_AYA).keep_spaces()),
    ("superbpe", pre(&SUPERBPE).keep_spaces()),
    ("trillion", pre(&GPT2).keep_spaces()),
    ("granite-docling", pre(&GPT2).keep_spaces()),
    ("bailingmoe", pre(&BAILINGMOE).keep_spaces()),
    ("bailingmoe2", pre(&BAILINGMOE).keep_spaces()),
    ("llada-moe", pre(&BAILINGMOE).keep_spaces()),
    ("seed-coder", pre(&SEED_CODER).keep_spaces()),
    ("hunyuan", pre(&QWEN2).keep_spaces()),
    ("hunyuan-dense", pre(&DEEPSEEK3_LLM).keep_spaces()),
    ("hy_v4", pre(&DEEPSEEK3_LLM).keep_spaces()),
    ("joyai-llm", pre(&DEEPSEEK3_LLM).keep_spaces()),
    ("kimi-k2", pre(&KIMI_K2).keep_spaces()),
    ("ufakzeka", pre(&UFAKZEKA).keep_spaces()),
    ("grok-2", pre(&QWEN2).keep_spaces()),
    ("afmoe", pre(&AFMOE).keep_spaces()),
    ("laguna", pre(&LAGUNA).keep_spaces()),
    ("minimax-m2", pre(&GPT4O).keep_spaces()),
    ("solar-open", pre(&QWEN2).keep_spaces()),
    ("mellum2", pre(&STARCODER)),
];

// The expression lists, named after the first of llama.cpp's pre-types that uses each.

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: LLAMA3, DBRX, SMAUG, CHATGLM4.
static LLAMA3: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: JAIS2.
static JAIS2: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: DEEPSEEK_LLM.
static DEEPSEEK_LLM: Expressions = Expressions::new(
    &[
        "[\r\n]",
        r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
        r"\s+$",
        r"[一-龥ࠀ-一가-퟿]+",
        r"\p{N}+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: DEEPSEEK3_LLM, HUNYUAN_DENSE, JOYAI_LLM, HY_V4.
static DEEPSEEK3_LLM: Expressions = Expressions::new(
    &[
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: SPARK2_5.
static SPARK2_5: Expressions = Expressions::new(
    &[
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
        r"\p{N}",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: YOUTU.
static YOUTU: Expressions = Expressions::new(
    &[
        r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: DEEPSEEK_CODER.
static DEEPSEEK_CODER: Expressions = Expressions::new(
    &[
        "[\r\n]",
        r"\s?\p{L}+",
        r"\s?\p{P}+",
        r"[一-龥ࠀ-一가-퟿]+",
        r"\p{N}",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: FALCON.
static FALCON: Expressions = Expressions::new(
    &[
        r"[\p{P}\$\+<=>\^~\|`]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"[0-9][0-9][0-9]",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2.
static STARCODER: Expressions = Expressions::new(
    &[
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING.
static GPT2: Expressions = Expressions::new(
    &[r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: STABLELM2, QWEN2, HUNYUAN, SOLAR_OPEN, GROK_2.
static QWEN2: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: QWEN35.
static QWEN35: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: PORO, BLOOM, GPT3_FINNISH.
static PORO: Expressions = Expressions::new(&[r" ?[^(\s|.,!?…。，、।۔،)]+"], true);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: VIKING.
static VIKING: Expressions = Expressions::new(&[r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"], true);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: TEKKEN.
static TEKKEN: Expressions = Expressions::new(
    &[
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: CHAMELEON.
static CHAMELEON: Expressions = Expressions::new(
    &[
        r"<sentinel:[0-9]+>",
        r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        r"([\t\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: GPT4O, MINIMAX_M2.
static GPT4O: Expressions = Expressions::new(
    &[
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: GRANITE_EMB_MULTI.
static GRANITE_EMB_MULTI: Expressions = Expressions::new(
    &[
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: TINY_AYA.
static TINY_AYA: Expressions = Expressions::new(
    &[
        r"\d{1,3}(?=(?:\d{3})*\b)",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: KIMI_K2.
static KIMI_K2: Expressions = Expressions::new(&[r"\p{Han}+"], true);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: SUPERBPE.
static SUPERBPE: Expressions = Expressions::new(&[r"\p{N}+", r"(?=(\d{3})+(?!\d))"], true);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: BAILINGMOE.
static BAILINGMOE: Expressions = Expressions::new(
    &[
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: SEED_CODER.
static SEED_CODER: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: UFAKZEKA.
static UFAKZEKA: Expressions = Expressions::new(
    &[r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: AFMOE.
static AFMOE: Expressions = Expressions::new(
    &[
        r"\p{AFMoE_digits}",
        r"[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: LAGUNA.
static LAGUNA: Expressions = Expressions::new(
    &[
        r"[^\n]+|[\n]+",
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: EXAONE_MOE.
static EXAONE_MOE: Expressions = Expressions::new(
    &[
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: GEMMA4, SARVAM_MOE.
static GEMMA4: Expressions = Expressions::new(&[r"[^\n]+|[\n]+"], false);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: MINICPM5.
static MINICPM5: Expressions = Expressions::new(
    &[
        r"\p{N}{1,3}",
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ],
    true,
);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: WHITESPACE.
static WHITESPACE: Expressions = Expressions::new(&[r"\S+"], false);

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: DEFAULT.
static DEFAULT: Expressions = Expressions::new(
    &[
        r"[\p{P}\$\+<=>\^~\|]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"\p{N}+",
        r"[0-9][0-9][0-9]",
    ],
    true,
);
