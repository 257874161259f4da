// The Parquet benchmark's independent side (bench/parquet.sh): writing its file with the Rust
// Arrow/Parquet writer (parquet-wasm) and timing hyparquet reading it in Node.
//
//   node parquet_bench.mjs write OUT ROWS   8 numeric and 2 string columns, snappy, dictionary
//                                           where it pays, row groups of 1,000,000 rows,
//                                           streamed (memory bounded at any size)
//   node parquet_bench.mjs tfrecord OUT ROWS
//                                           the same rows as tf.train.Example records in a
//                                           TFRecord file (integers as int64 lists, floats as
//                                           float lists, strings as bytes lists), for
//                                           tfrecord() | map(parse_example, ...)
//   node parquet_bench.mjs read FILE [COLUMN...]
//                                           reads every row of the columns (default all) with
//                                           hyparquet; prints "ROWS SECONDS"
import * as arrow from 'apache-arrow'
import * as pw from 'parquet-wasm'
import { asyncBufferFromFile, parquetMetadataAsync, parquetRead } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'
import { openSync, writeSync, closeSync } from 'node:fs'

const WORDS = Array.from({ length: 1000 }, (_, i) => `word${i}-${(i * 2654435761) % 99991}`)

function batchTable(start, n) {
  let s = (start * 2654435761 + 1) >>> 0
  const rnd = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0
    return s
  }
  const a = new BigInt64Array(n), b = new Int32Array(n), c = new Float64Array(n),
    d = new Float32Array(n), e = new BigInt64Array(n), f = new Int32Array(n),
    g = new Float64Array(n), h = new Int32Array(n)
  const t1 = new Array(n), t2 = new Array(n)
  for (let i = 0; i < n; i++) {
    const k = start + i
    a[i] = BigInt(k)
    b[i] = rnd() % 1000
    c[i] = rnd() / 4294967296
    d[i] = (rnd() % 100000) / 100
    e[i] = BigInt(rnd()) * 1000n
    f[i] = k % 10
    g[i] = k * 0.5
    h[i] = rnd() | 0
    t1[i] = WORDS[rnd() % WORDS.length]
    t2[i] = `${WORDS[rnd() % WORDS.length]} ${WORDS[rnd() % WORDS.length]}`
  }
  return arrow.tableFromArrays({ id: a, small: b, uniform: c, price: d, big: e, label: f,
    half: g, noise: h, word: t1, pair: t2 })
}

async function write(out, rows) {
  const props = new pw.WriterPropertiesBuilder()
    .setCompression(pw.Compression.SNAPPY)
    .setDictionaryEnabled(true)
    .setMaxRowGroupSize(1000000)
    .build()
  // One row group's rows at a time go through the writer's stream, so memory stays bounded
  // whatever the size of the file.
  const step = 1000000
  let start = 0
  const batches = new ReadableStream({
    pull(controller) {
      if (start >= rows) {
        controller.close()
        return
      }
      const t = batchTable(start, Math.min(step, rows - start))
      start += step
      for (const b of pw.Table.fromIPCStream(arrow.tableToIPC(t, 'stream')).recordBatches())
        controller.enqueue(b)
    },
  })
  const bytes = await pw.transformParquetStream(batches, props)
  const fd = openSync(out, 'w')
  const reader = bytes.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    writeSync(fd, value)
  }
  closeSync(fd)
}

// ---- tf.train.Example and TFRecord framing, written by hand (protobuf wire format) ----------

const CRC32C = (() => {
  const t = new Uint32Array(256)
  for (let i = 0; i < 256; i++) {
    let c = i
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1
    t[i] = c >>> 0
  }
  return t
})()

function crc32c(buf) {
  let c = 0xffffffff
  for (let i = 0; i < buf.length; i++) c = CRC32C[(c ^ buf[i]) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

const masked = (crc) => ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0

function varint(out, v) {
  v = BigInt.asUintN(64, BigInt(v))
  while (v >= 0x80n) { out.push(Number(v & 0x7fn) | 0x80); v >>= 7n }
  out.push(Number(v))
}

function lenField(out, tag, bytes) {
  out.push(tag)
  varint(out, bytes.length)
  for (const b of bytes) out.push(b)
}

// kind: 'bytes', 'int64' or 'float' (the column's type decides, not the value).
function feature(value, kind) {
  const list = []
  if (kind === 'bytes') {
    lenField(list, 0x0a, Buffer.from(value))
    const f = []
    lenField(f, 0x0a, list) // bytes_list = 1
    return f
  }
  if (kind === 'int64') {
    const packed = []
    varint(packed, value)
    lenField(list, 0x0a, packed)
    const f = []
    lenField(f, 0x1a, list) // int64_list = 3
    return f
  }
  const b = Buffer.alloc(4)
  b.writeFloatLE(value)
  lenField(list, 0x0a, [...b])
  const f = []
  lenField(f, 0x12, list) // float_list = 2
  return f
}

function example(row, kinds) {
  const features = []
  for (const [k, v] of Object.entries(row)) {
    const entry = []
    lenField(entry, 0x0a, Buffer.from(k))
    lenField(entry, 0x12, feature(v, kinds[k]))
    lenField(features, 0x0a, entry)
  }
  const ex = []
  lenField(ex, 0x0a, features)
  return Buffer.from(ex)
}

function tfrecord(out, rows) {
  const fd = openSync(out, 'w')
  const step = 100000
  for (let start = 0; start < rows; start += step) {
    const t = batchTable(start, Math.min(step, rows - start))
    const cols = t.schema.fields.map((f) => [f.name, t.getChild(f.name)])
    const kinds = Object.fromEntries(t.schema.fields.map((f) => [f.name,
      f.type.typeId === arrow.Type.Float ? 'float'
        : f.type.typeId === arrow.Type.Int ? 'int64' : 'bytes']))
    const parts = []
    for (let i = 0; i < t.numRows; i++) {
      const row = {}
      for (const [name, col] of cols) row[name] = col.get(i)
      const data = example(row, kinds)
      const head = Buffer.alloc(12)
      head.writeBigUInt64LE(BigInt(data.length))
      head.writeUInt32LE(masked(crc32c(head.subarray(0, 8))), 8)
      const tail = Buffer.alloc(4)
      tail.writeUInt32LE(masked(crc32c(data)))
      parts.push(head, data, tail)
    }
    writeSync(fd, Buffer.concat(parts))
  }
  closeSync(fd)
}

async function read(file, columns) {
  const buf = await asyncBufferFromFile(file)
  const metadata = await parquetMetadataAsync(buf)
  const t0 = process.hrtime.bigint()
  // Rows are counted from the decoded column chunks (onChunk), not collected: memory stays
  // bounded for any file size.
  let rows = 0
  await parquetRead({
    file: buf, metadata, compressors, columns: columns.length ? columns : undefined,
    onChunk: (chunk) => { if (chunk.rowEnd > rows) rows = chunk.rowEnd },
  })
  const secs = Number(process.hrtime.bigint() - t0) / 1e9
  console.log(`${rows} ${secs.toFixed(3)}`)
}

const [cmd, path, ...rest] = process.argv.slice(2)
if (cmd === 'write' && path && Number(rest[0]) > 0) await write(path, Number(rest[0]))
else if (cmd === 'tfrecord' && path && Number(rest[0]) > 0) tfrecord(path, Number(rest[0]))
else if (cmd === 'read' && path) await read(path, rest)
else {
  console.error('usage: node parquet_bench.mjs write OUT ROWS | tfrecord OUT ROWS | read FILE [COLUMN...]')
  process.exit(2)
}
