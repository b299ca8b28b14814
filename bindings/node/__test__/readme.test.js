'use strict'
// Every ```js block of the package's README (and the repository's), run as a
// reader would paste it: each block alone, in a child process of its own, as
// the body of an async function (so top-level `await` works), against a real
// redis-server and an HTTP partner on 127.0.0.1. The one name a block may use
// without defining it is `rb` (`const rb = require('ratebound')`, the
// README's convention, stated in its first block).
//
// The only changes made to a block before it runs are the addresses in
// `rewrites()` (the README's clients connect to the default Redis port and
// call https://partner.example; the test's servers live on free 127.0.0.1
// ports) and shared-memory paths (to a temporary directory). Everything else
// runs as printed, so a block that uses a name it never defines, or an option
// the API does not take, fails here. A block's child exits when the block's
// last statement has finished, whatever it left open (a listening server, a
// Redis connection).
const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const { once } = require('node:events')
const { HOST, startServer, stopAll } = require('./fixtures/redis-server.js')

const PKG = path.resolve(__dirname, '..')
const READMES = [path.join(PKG, 'README.md'), path.resolve(PKG, '..', '..', 'README.md')]

function blocks(file, lang = 'js') {
  const lines = fs.readFileSync(file, 'utf8').split('\n')
  const found = []
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== '```' + lang) continue
    let j = i + 1
    while (lines[j].trim() !== '```') j++
    found.push({ name: `${path.relative(path.resolve(PKG, '..', '..'), file)}:${i + 2}`, source: lines.slice(i + 1, j).join('\n') })
    i = j
  }
  return found
}

const ALL = READMES.flatMap((f) => blocks(f))

function rewrites(redisPort, partner, shm) {
  return [
    // ioredis: no options, or an options object → the test's server.
    [/new Redis\(\)/g, `new Redis({ host: '${HOST}', port: ${redisPort} })`],
    [/new Redis\(\{/g, `new Redis({ host: '${HOST}', port: ${redisPort}, `],
    // node-redis.
    [/createClient\(\{/g, `createClient({ url: 'redis://${HOST}:${redisPort}', `],
    [/https:\/\/partner\.example/g, partner],
    [/\/dev\/shm\//g, `${shm}/`],
    // A server the README starts on port 3000: any free port here.
    [/listen\(\{ port: 3000 \}\)/g, `listen({ port: 0, host: '${HOST}' })`],
  ]
}

let redis = null
let partner = null
let partnerUrl = null
let shm = null

before(async () => {
  redis = await startServer()
  partner = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('[]'))
  })
  partner.listen(0, HOST)
  await once(partner, 'listening')
  partnerUrl = `http://${HOST}:${partner.address().port}`
  shm = fs.mkdtempSync(path.join(os.tmpdir(), 'rb-readme-'))
})

after(async () => {
  partner.close()
  stopAll()
  fs.rmSync(shm, { recursive: true, force: true })
})

function run(source) {
  let code = source
  for (const [pattern, replacement] of rewrites(redis.port, partnerUrl, shm)) code = code.replace(pattern, replacement)
  const prelude = /\bconst rb = require\('ratebound'\)/.test(code) ? '' : "const rb = require('ratebound');\n"
  const program = [
    "'use strict'",
    `const require_ = require('node:module').createRequire(${JSON.stringify(path.join(PKG, 'readme-block.js'))})`,
    ';(async (require) => {',
    prelude + code,
    '})(require_).then(() => process.exit(0), (e) => { console.error(e); process.exit(1) })',
  ].join('\n')
  const file = path.join(shm, `block-${Math.random().toString(36).slice(2)}.js`)
  fs.writeFileSync(file, program)
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (b) => { out += b })
    child.stderr.on('data', (b) => { out += b })
    const timer = setTimeout(() => child.kill('SIGKILL'), 30000)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, out })
    })
  })
}

test('the READMEs have their js blocks', () => {
  // If the extraction broke, the tests below would pass on nothing.
  assert.ok(ALL.length >= 15, ALL.map((b) => b.name).join(', '))
})

for (const block of ALL) {
  test(`README block ${block.name} runs`, async () => {
    const { code, signal, out } = await run(block.source)
    assert.equal(code, 0, `${block.name} exited with ${code ?? signal}:\n${out}`)
  })
}

// Every ```ts block, type-checked as printed against ratebound.d.ts (and the
// frameworks' own types) with the package's tsconfig: each block a module
// of its own in a scratch folder inside the package, so that 'ratebound'
// resolves to this package as it does for a user.
const TS = READMES.flatMap((f) => blocks(f, 'ts'))

test('the README ts blocks type-check', () => {
  assert.ok(TS.length >= 1, 'no ts block found')
  const dir = fs.mkdtempSync(path.join(__dirname, '.readme-ts-'))
  try {
    const files = TS.map((block, i) => {
      const name = `block${i}.ts`
      fs.writeFileSync(path.join(dir, name), `// ${block.name}\n${block.source}\nexport {}\n`)
      return name
    })
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ extends: '../tsconfig.json', files }))
    const tsc = require.resolve('typescript/bin/tsc')
    const r = require('node:child_process').spawnSync(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json')], { encoding: 'utf8' })
    assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}\n${TS.map((b) => b.name).join(', ')}`)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
