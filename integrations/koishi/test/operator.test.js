// @ts-check
'use strict'
// The operator's commands on the service's routes, end to end: a real Koishi 4.18 (SQLite,
// autoAssign: false) with three OneBot-like mock bots, the real service binary (its trigger
// delays 20 s, so nothing here waits for one), in Chinese and in English. Runs in order.
//
//   bots 1001, 1002: groups 1-4        bot 1003: groups 3-4
//
// Users: reader (authority 1), reader-en (1, en-US), admin (4), admin-en (4, en-US).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const plugin = require('../src')
const zh = require('../locales/zh-CN.json')
const en = require('../locales/en-US.json')
const { createKoishi, captureLogs, waitFor, oneBot, fill, PLATFORM } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const G = (/** @type {number} */ i) => String(600000 + i)
const GROUPS = [1, 2, 3, 4].map(G)
const MEMBERS = { '1001': GROUPS, '1002': GROUPS, '1003': GROUPS.slice(2) }
const DELAYS = { botOnline: 20, botOffline: 20, botStatus: 20, channelJoined: 20, channelLeft: 20 }
const ZH = zh.commands
/** Python: takes SQLite's write lock on the file argv[1], says so, keeps it until stdin ends. */
const HOLD_WRITE_LOCK = [
  'import sqlite3, sys',
  'db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)',
  'db.execute("BEGIN EXCLUSIVE")',
  'print("locked", flush=True)',
  'sys.stdin.read()',
  'db.execute("COMMIT")',
].join('\n')
const EN = en.commands

/** @type {string} */ let dir
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs

/** The one reply of a command (answered once, by one bot). @param {string} group @param {string} user @param {string} content */
async function command(group, user, content) {
  const r = oneBot(await koishi.ask(group, user, content))
  assert.equal(r.texts.length, 1, JSON.stringify(r.texts))
  return { bot: r.bot, text: r.texts[0] }
}

/** The service's pin of a group (GET /v1/pins), or null. @param {string} g */
async function pinOf(g) {
  const { body } = await service.api('GET', '/v1/pins')
  return /** @type {any[]} */ (body.pins).find(p => p.platform === PLATFORM && p.channel === g) ?? null
}

/** The row of a group. @param {string} g */
async function row(g) {
  return (await koishi.rows()).find(x => x.id === g)?.assignee ?? null
}

/** Koishi answers group g from `bot` only, and its row names it. @param {string} g @param {string} bot */
async function answeredBy(g, bot) {
  await waitFor(async () => JSON.stringify(await koishi.whoAnswers(g)) === JSON.stringify([bot]) && (await row(g)) === bot,
    3000, `${bot} answers in ${g}`)
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-operator-'))
  service = new Service({ dir, port: await freePort(), triggerDelays: DELAYS })
  await service.start()
  logs = captureLogs()
  koishi = await createKoishi({
    dir,
    bots: Object.entries(MEMBERS).map(([selfId, guilds]) => ({ selfId, guilds })),
    plugin,
    pluginConfig: {
      endpoint: service.endpoint, token: TOKEN, reporter: 'koishi-operator', heartbeatInterval: 1000,
      retryMin: 100, retryMax: 500, requestTimeout: 3000, messageReportInterval: 0,
    },
  })
  const db = koishi.app.database
  await db.createUser(PLATFORM, 'reader', { authority: 1 })
  await db.createUser(PLATFORM, 'reader-en', { authority: 1, locales: ['en-US'] })
  await db.createUser(PLATFORM, 'admin', { authority: 4 })
  await db.createUser(PLATFORM, 'admin-en', { authority: 4, locales: ['en-US'] })
  for (const g of GROUPS) await db.createUser(PLATFORM, 'u' + g, { authority: 1 })
  // the first plan ran (startup 0) and every row is written
  await waitFor(async () => {
    if (!(await service.api('GET', '/v1/status')).body.last_run) return null
    const a = await service.assignments()
    if (!GROUPS.every(g => a[g])) return null
    const rows = Object.fromEntries((await koishi.rows()).map(r => [r.id, r.assignee]))
    return GROUPS.every(g => rows[g] === a[g])
  }, 10000, 'every group assigned and written')
})

after(async () => {
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('a pin made through the service\'s API reaches this Koishi\'s channel.assignee within 1 s (trigger delays 20 s)', async () => {
  const g = GROUPS[0]
  const a = await service.assignments()
  const to = a[g] === '1001' ? '1002' : '1001'
  const t0 = performance.now()
  const put = await service.api('PUT', `/v1/pins/onebot/${g}`, { bot: to, note: 'latency' })
  assert.equal(put.status, 200)
  const ms = await waitFor(async () => (await row(g)) === to && performance.now() - t0, 1000, 'the row names the pinned bot within 1 s')
  console.log(`# a pin through the API → channel.assignee in Koishi's database after ${ms.toFixed(0)} ms (trigger delays 20 s)`)
  assert.ok(ms < 1000)
  assert.deepEqual(await koishi.whoAnswers(g), [to])
  assert.equal((await service.api('DELETE', `/v1/pins/onebot/${g}`)).status, 200)
})

test('pin in a group (Chinese): to the named bot; the group moves at once and the service lists it', async () => {
  const g = GROUPS[0]
  const a = await service.assignments()
  const other = a[g] === '1001' ? '1002' : '1001'
  const r = await command(g, 'admin', `分配.固定 ${other}`)
  assert.equal(r.bot, a[g], 'answered once, by the assignee')
  assert.equal(r.text, fill(ZH['auto-assign.pin'].messages.done, { channel: g, bot: other, made: '' }))
  const pin = await pinOf(g)
  assert.equal(pin?.bot, other)
  assert.equal(pin?.state, 'in-force')
  assert.equal(pin?.note, 'by onebot:admin via Koishi')
  await answeredBy(g, other)
  // explain says so
  const x = await command(g, 'reader', '分配.谁')
  assert.equal(x.bot, other)
  assert.ok(x.text.includes(fill(ZH['auto-assign.explain'].messages.reason, { reason: zh['auto-assign'].reason.operator_pin })), x.text)
  assert.ok(x.text.includes(fill(ZH['auto-assign.explain'].messages.pinned, { bot: other, made: '（备注：by onebot:admin via Koishi）' })), x.text)
})

test('pin: by default the bot the command was sent to (a mention); -g another group, --until, --note; in English', async () => {
  const [, g2, g3] = GROUPS
  let a = await service.assignments()
  const other = a[g2] === '1001' ? '1002' : '1001'
  // sent to `other` by mentioning it: it answers, and the group is pinned to it
  const r = await command(g2, 'admin', `<at id="${other}"/> 分配.固定`)
  assert.equal(r.bot, other)
  assert.equal(r.text, fill(ZH['auto-assign.pin'].messages.done, { channel: g2, bot: other, made: '' }))
  await answeredBy(g2, other)

  // from group 2, about group 3, until 2 h, with a note, in English
  a = await service.assignments()
  const to = a[g3] === '1003' ? '1001' : '1003'
  const e = await command(g2, 'admin-en', `auto-assign.pin ${to} -g ${g3} --until 2h --note "VIP group"`)
  const pin = await pinOf(g3)
  assert.ok(pin?.until, 'the service has the end')
  assert.ok(Date.parse(pin.until) - Date.now() > 110 * 60_000 && Date.parse(pin.until) - Date.now() <= 120 * 60_000, pin.until)
  assert.equal(pin.note, 'VIP group (by onebot:admin-en via Koishi)')
  assert.equal(e.text, fill(EN['auto-assign.pin'].messages.done, {
    channel: g3, bot: to, made: ` until ${pin.until} (note: VIP group)`,
  }))
  await answeredBy(g3, to)

  // the list, in both languages
  const list = await command(g2, 'reader', '分配.固定列表')
  assert.equal(list.text.split('\n')[0], fill(ZH['auto-assign.pins'].messages.title, { count: 3 }))
  assert.ok(list.text.includes(fill(ZH['auto-assign.pins'].messages.pinned, { channel: g2, bot: other, made: '（备注：by onebot:admin via Koishi）' })), list.text)
  assert.ok(list.text.includes(`· 群 ${g3} → ${to}，直到 ${pin.until}（备注：VIP group (by onebot:admin-en via Koishi)）`), list.text)
  const listEn = await command(g2, 'reader-en', 'auto-assign.pins')
  assert.ok(listEn.text.startsWith('Pinned and held groups (3):'), listEn.text)
  assert.ok(listEn.text.includes(`· group ${g3} → ${to} until ${pin.until} (note: VIP group (by onebot:admin-en via Koishi))`), listEn.text)
})

test('a pinned bot that cannot answer: the plan answers meanwhile, explain and pins say so; back, it answers again', async () => {
  const g3 = GROUPS[2]
  const pinned = (await pinOf(g3))?.bot
  assert.ok(pinned)
  const bot = koishi.bot(pinned)
  bot.offline()
  try {
    const stand = pinned === '1003' ? ['1001', '1002'] : ['1001', '1002', '1003'].filter(b => b !== pinned)
    const meanwhile = await waitFor(async () => {
      const w = await koishi.whoAnswers(g3)
      return w.length === 1 && stand.includes(w[0]) ? w[0] : null
    }, 3000, 'another bot answers meanwhile')
    assert.equal((await pinOf(g3))?.state, 'waiting')
    const x = await command(g3, 'reader', '分配.谁')
    assert.equal(x.bot, meanwhile)
    assert.ok(x.text.includes(fill(ZH['auto-assign.explain'].messages['pin-waiting'], {
      bot: pinned, assignee: meanwhile, made: (await pinOf(g3))?.until ? `，直到 ${(await pinOf(g3)).until}（备注：VIP group (by onebot:admin-en via Koishi)）` : '',
    })), x.text)
    const list = await command(g3, 'reader-en', 'auto-assign.pins')
    assert.ok(list.text.includes(`· group ${g3} → ${pinned} (cannot answer now; ${meanwhile} meanwhile)`), list.text)
  } finally {
    bot.online()
  }
  await answeredBy(g3, pinned)
})

test('refusals in words: not a member (with the members), an unknown bot, an unknown group, a bad --until, a bad bot; nothing changes', async () => {
  const g1 = GROUPS[0]
  const pinBefore = await pinOf(g1)
  let r = await command(g1, 'admin', '分配.固定 1003')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['not-member'], { bot: '1003', channel: g1, members: '1001、1002' }))
  r = await command(g1, 'admin-en', 'auto-assign.pin 1003')
  assert.equal(r.text, fill(en['auto-assign'].refusal['not-member'], { bot: '1003', channel: g1, members: '1001, 1002' }))
  r = await command(g1, 'admin', '分配.固定 9999')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['unknown-bot'], { bot: '9999' }))
  r = await command(g1, 'admin', '分配.固定 1001 -g 699999')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['unknown-group'], { channel: '699999' }))
  r = await command(g1, 'admin-en', 'auto-assign.hold -g 699999')
  assert.equal(r.text, fill(en['auto-assign'].refusal['unknown-group'], { channel: '699999' }))
  r = await command(g1, 'admin', '分配.固定 1001 --until 昨天')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['bad-until'], { until: '昨天' }))
  r = await command(g1, 'admin-en', 'auto-assign.drain 1002 --until 2020-01-01T00:00:00Z')
  assert.equal(r.text, fill(en['auto-assign'].refusal['bad-until'], { until: '2020-01-01T00:00:00Z' }))
  r = await command(g1, 'admin', '分配.固定 telegram:5')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['bad-bot'], { bot: 'telegram:5' }))
  r = await command(g1, 'admin', '分配.排空 9999')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['unknown-bot'], { bot: '9999' }))
  r = await command(g1, 'admin', '分配.恢复 1003')
  assert.equal(r.text, fill(zh['auto-assign'].refusal['not-drained'], { bot: '1003' }))
  assert.deepEqual(await pinOf(g1), pinBefore, 'nothing changed')
  assert.deepEqual((await service.api('GET', '/v1/drains')).body.drains, [])
})

test('below changeAuthority: every change refused, once; reading allowed', async () => {
  const g1 = GROUPS[0]
  const a = await service.assignments()
  for (const [user, content, refusal] of [
    ['reader', '分配.固定 1001', '权限不足。'],
    ['reader', '分配.保持空', '权限不足。'],
    ['reader', '分配.取消固定', '权限不足。'],
    ['reader-en', 'auto-assign.drain 1002', 'Low authority.'],
    ['reader-en', 'auto-assign.undrain 1002', 'Low authority.'],
    ['reader', '分配.重新分配', '权限不足。'],
  ]) {
    const r = await command(g1, user, content)
    assert.equal(r.bot, a[g1], content)
    assert.equal(r.text, refusal, content)
  }
  assert.equal((await command(g1, 'reader', '分配.排空列表')).text, ZH['auto-assign.drains'].messages.none)
  assert.equal((await service.api('GET', '/v1/pins')).body.pins.length, 3, 'no pin changed')
})

test('unpin: the group returns to the plan; a group with no pin says so', async () => {
  const [g1, g2] = GROUPS
  const pin = await pinOf(g1)
  assert.ok(pin)
  const r = await command(g1, 'admin', '分配.取消固定')
  const a = await service.assignments()
  assert.equal(r.text, fill(ZH['auto-assign.unpin'].messages.done, {
    channel: g1, what: fill(ZH['auto-assign.unpin'].messages['was-pinned'], { bot: pin.bot }), assignee: a[g1],
  }))
  assert.equal(await pinOf(g1), null)
  await answeredBy(g1, a[g1])
  const pin2 = await pinOf(g2)
  assert.ok(pin2?.bot)
  const e = await command(g1, 'admin-en', `auto-assign.unpin ${g2}`)
  assert.equal(e.text, fill(EN['auto-assign.unpin'].messages.done, {
    channel: g2, what: fill(EN['auto-assign.unpin'].messages['was-pinned'], { bot: pin2.bot }), assignee: (await service.assignments())[g2],
  }))
  assert.equal(await pinOf(g2), null)
  const none = await command(g1, 'admin', '分配.取消固定')
  assert.equal(none.text, fill(zh['auto-assign'].refusal['not-pinned'], { channel: g1 }))
  const noneEn = await command(g1, 'admin-en', `auto-assign.unpin -g ${g2}`)
  assert.equal(noneEn.text, fill(en['auto-assign'].refusal['not-pinned'], { channel: g2 }))
})

test('hold: nobody answers; a mention still runs commands, explain says held; released, the plan answers', async () => {
  const g4 = GROUPS[3]
  const a = await service.assignments()
  const r = await command(g4, 'admin', '分配.保持空 --note 活动暂停')
  assert.equal(r.bot, a[g4])
  assert.equal(r.text, fill(ZH['auto-assign.hold'].messages.done, { channel: g4, made: '（备注：活动暂停）' }))
  const pin = await pinOf(g4)
  assert.equal(pin?.bot, null)
  assert.equal(pin?.state, 'held')
  await waitFor(async () => (await row(g4)) === '', 3000, 'the row has no assignee')
  assert.deepEqual(await koishi.whoAnswers(g4), [], 'nobody answers a held group')
  // a mention still reaches a bot: explain in English
  const x = await command(g4, 'reader-en', '<at id="1003"/> auto-assign.explain')
  assert.equal(x.bot, '1003')
  assert.ok(x.text.startsWith(`Group ${g4}: no bot answers now.`), x.text)
  assert.ok(x.text.includes(`Why: ${en['auto-assign'].reason.held}`), x.text)
  assert.ok(x.text.includes(fill(EN['auto-assign.explain'].messages.held, { made: ' (note: 活动暂停 (by onebot:admin via Koishi))' })), x.text)
  const list = await command(g4, 'reader', '<at id="1001"/> 分配.固定列表')
  assert.ok(list.text.includes(`· 群 ${g4}：保持为空（备注：活动暂停 (by onebot:admin via Koishi)）`), list.text)
  // status counts it
  const s = await command(g4, 'reader', '<at id="1001"/> 分配.状态')
  assert.ok(s.text.includes(fill(ZH['auto-assign.status'].messages.overrides, { pins: 1, holds: 1, drains: 0 })), s.text)
  // released through a mention
  const u = await command(g4, 'admin-en', '<at id="1002"/> auto-assign.unpin')
  const now = await service.assignments()
  assert.ok(now[g4])
  assert.equal(u.text, fill(EN['auto-assign.unpin'].messages.done, { channel: g4, what: EN['auto-assign.unpin'].messages['was-held'], assignee: now[g4] }))
  await answeredBy(g4, now[g4])
  // in English, for an hour, and released in Chinese
  const e = await command(g4, 'admin-en', 'auto-assign.hold --until 1h')
  const until = (await pinOf(g4))?.until
  assert.ok(until)
  assert.equal(e.text, fill(EN['auto-assign.hold'].messages.done, { channel: g4, made: ` until ${until}` }))
  await waitFor(async () => (await row(g4)) === '', 3000, 'held again')
  oneBot(await koishi.ask(g4, 'admin', '<at id="1001"/> 分配.取消固定'))
  await answeredBy(g4, (await service.assignments())[g4])
})

test('drain and undrain: the bot\'s groups move at once (it keeps none: others can take them); drains and explain show it', async () => {
  const g1 = GROUPS[0]
  let a = await service.assignments()
  const drained = '1002'
  assert.ok(GROUPS.some(g => a[g] === drained), `${drained} has groups: ${JSON.stringify(a)}`)
  const r = await command(g1, 'admin', `分配.排空 ${drained} --until 1d --note 风控`)
  const d = (await service.api('GET', '/v1/drains')).body.drains
  assert.equal(d.length, 1)
  assert.equal(d[0].bot, drained)
  assert.equal(d[0].note, '风控 (by onebot:admin via Koishi)')
  assert.equal(r.text, fill(ZH['auto-assign.drain'].messages.done, { bot: drained, kept: 0, made: `，直到 ${d[0].until}（备注：风控）` }))
  a = await service.assignments()
  assert.ok(GROUPS.every(g => a[g] && a[g] !== drained), JSON.stringify(a) + JSON.stringify((await service.api('GET', '/v1/explain/onebot/' + GROUPS[3])).body))
  for (const g of GROUPS) await answeredBy(g, a[g])
  const list = await command(g1, 'reader-en', 'auto-assign.drains')
  assert.equal(list.text, [
    fill(EN['auto-assign.drains'].messages.title, { count: 1 }),
    fill(EN['auto-assign.drains'].messages.drain, { bot: drained, kept: 0, made: ` until ${d[0].until} (note: 风控 (by onebot:admin via Koishi))` }),
  ].join('\n'))
  const x = await command(g1, 'reader', '分配.谁')
  assert.ok(x.text.includes(fill(ZH['auto-assign.explain'].messages.drained, { bots: drained })), x.text)
  const e = await command(g1, 'admin-en', `auto-assign.undrain ${drained}`)
  assert.equal(e.text, fill(EN['auto-assign.undrain'].messages.done, { bot: drained }))
  assert.deepEqual((await service.api('GET', '/v1/drains')).body.drains, [])
  // the other way round: drained in English (1003 keeps nothing: 1001 shares its groups), undrained in Chinese
  const d2 = await command(g1, 'admin-en', 'auto-assign.drain 1003')
  assert.equal(d2.text, fill(EN['auto-assign.drain'].messages.done, { bot: '1003', kept: 0, made: '' }))
  assert.ok(!Object.values(await service.assignments()).includes('1003'))
  const u2 = await command(g1, 'admin', '分配.恢复 1003')
  assert.equal(u2.text, fill(ZH['auto-assign.undrain'].messages.done, { bot: '1003' }))
  assert.deepEqual((await service.api('GET', '/v1/drains')).body.drains, [])
})

test('the dry run: what a rebalance would move and the loads, nothing changed; -n for a reader, preview in English', async () => {
  // a fourth bot joins every group: with botOnline 20 s nothing moves to it yet, the dry run shows what would
  const g1 = GROUPS[0]
  koishi.addBot({ selfId: '1004', guilds: GROUPS })
  await waitFor(async () => (await service.api('GET', '/v1/bots')).body.some((/** @type {any} */ b) => b.bot === '1004' && b.online), 3000, '1004 online')
  try {
    const before = await service.assignments()
    const runs = (await service.api('GET', '/v1/status')).body.last_run.number
    const { body: dry } = await service.api('POST', '/v1/rebalance?dryRun=true')
    const p = dry.platforms.find((/** @type {any} */ x) => x.platform === PLATFORM)
    assert.ok(p.moves.length > 0, 'a rebalance would give 1004 groups')
    const r = await command(g1, 'reader', '分配.重新分配 -n')
    const lines = r.text.split('\n')
    assert.equal(lines[0], ZH['auto-assign.preview'].messages.title)
    assert.equal(lines[1], fill(ZH['auto-assign.preview'].messages.moves, { count: p.moves.length, forced: p.forced, voluntary: p.voluntary }))
    for (const m of p.moves) {
      assert.ok(lines.includes(fill(ZH['auto-assign.preview'].messages.move, { channel: m.channel, from: m.from, to: m.to, rule: zh['auto-assign'].rule.balance })), r.text)
    }
    assert.ok(lines.some(l => l.startsWith('负载（前 → 后）：') && l.includes('1004 0 → ')), r.text)
    assert.match(r.text, /\n标准差 \d+\.\d\d → \d+\.\d\d，最多 \d+ → \d+ 个群。$/)
    const e = await command(g1, 'reader-en', 'auto-assign.preview')
    assert.ok(e.text.startsWith(`${EN['auto-assign.preview'].messages.title}\n${p.moves.length} group(s) would move (`), e.text)
    assert.ok(e.text.includes('1004 0 → '), e.text)
    // the Chinese alias, and the long option
    assert.equal((await command(g1, 'reader', '分配.预演')).text, r.text)
    assert.equal((await command(g1, 'reader-en', 'auto-assign.rebalance --dry-run')).text, e.text)
    // nothing changed
    assert.deepEqual(await service.assignments(), before)
    assert.equal((await service.api('GET', '/v1/status')).body.last_run.number, runs)
    // an admin's rebalance does move them
    const done = await command(g1, 'admin', '分配.重新分配')
    assert.match(done.text, /^重新分配完成（第 \d+ 次）：移动了 \d+ 个群。$/)
    assert.ok(Object.values(await service.assignments()).includes('1004'))
    const after = await command(g1, 'reader', '分配.预演')
    assert.equal(after.text.split('\n')[1], ZH['auto-assign.preview'].messages['no-moves'])
  } finally {
    koishi.removeBot('1004')
  }
  // its groups are given to the others at once
  const a = await waitFor(async () => {
    const a = await service.assignments()
    return GROUPS.every(g => a[g] && a[g] !== '1004') ? a : null
  }, 3000, "1004's groups given to the others")
  for (const g of GROUPS) await answeredBy(g, a[g])
})

test('a change the service\'s database cannot store within 5 s: in force, and the reply says it is not stored yet; stored once the database answers', async () => {
  const g = GROUPS[1]
  const a = await service.assignments()
  const other = a[g] === '1001' ? '1002' : '1001'
  const audit = async () => /** @type {any[]} */ ((await service.api('GET', '/v1/audit?limit=5')).body.audit)
  const since = (await audit())[0]?.at_ms ?? 0
  // another process holds SQLite's write lock on the service's database until told to let go
  const locker = spawn('python3', ['-c', HOLD_WRITE_LOCK, join(dir, 'state.db')], { stdio: ['pipe', 'pipe', 'inherit'] })
  const exited = new Promise(resolve => locker.once('exit', resolve))
  try {
    await new Promise((resolve, reject) => {
      locker.stdout.once('data', resolve)
      locker.once('exit', code => reject(new Error(`the lock holder exited (${code})`)))
    })
    const r = await command(g, 'admin', `分配.固定 ${other}`)
    const lines = r.text.split('\n')
    assert.equal(lines[0], fill(ZH['auto-assign.pin'].messages.done, { channel: g, bot: other, made: '' }))
    assert.equal(lines.at(-1), zh['auto-assign']['not-stored'], r.text)
    await answeredBy(g, other) // in force meanwhile
    assert.equal((await pinOf(g))?.bot, other)
  } finally {
    locker.stdin.end()
    await exited
  }
  // written once the database answers: its audit log (read from the database) has it
  await waitFor(async () => (await audit()).some(e => e.action === 'pin' && e.target === g && e.bot === other && e.at_ms >= since),
    10000, 'the pin stored')
  const r = await command(g, 'admin-en', 'auto-assign.unpin')
  assert.ok(!r.text.includes(en['auto-assign']['not-stored']), r.text)
})

test('the root command lists every command; authority levels of the new commands come from the config', async () => {
  const r = await command(GROUPS[0], 'reader', '分配')
  for (const k of ['pins', 'drains', 'preview', 'pin', 'hold', 'unpin', 'drain', 'undrain', 'assign']) {
    assert.ok(r.text.includes(fill(/** @type {any} */ (ZH['auto-assign'].messages)[k], { authority: 4 })), k)
  }
  koishi.pluginFork.dispose()
  const fork = koishi.app.plugin(plugin, { endpoint: service.endpoint, token: TOKEN, reporter: 'koishi-operator', readAuthority: 2, changeAuthority: 3 })
  try {
    const commander = /** @type {any} */ (koishi.app).$commander
    for (const name of ['pins', 'drains', 'preview', 'explain', 'status']) {
      assert.deepEqual(commander.get('auto-assign.' + name).config.permissions, ['authority:2'], name)
    }
    for (const name of ['pin', 'hold', 'unpin', 'drain', 'undrain', 'rebalance']) {
      assert.deepEqual(commander.get('auto-assign.' + name).config.permissions, ['authority:3'], name)
    }
  } finally {
    fork.dispose()
  }
})

test('every message was found in the locale files (no "missing" from Koishi\'s i18n), no command threw', () => {
  const missing = logs.records.filter(r => r.name === 'i18n' && /missing/.test(r.content))
  assert.deepEqual(missing.map(r => r.content), [])
  const thrown = logs.records.filter(r => r.name === 'command' || (r.name === 'auto-assign' && r.type === 'warn' && /\b(Type|Reference|Range|Syntax)Error\b|\n\s+at /.test(r.content)))
  assert.deepEqual(thrown.map(r => r.content), [])
})
