/* The sluice dashboard: fetches the dispatcher's status document (/api/status, what `sluice
 * status --json` prints) and the charts' samples (/api/history) every 2 seconds and renders the
 * view the location's hash names: #/ the overview, #/job/ID a job, #/worker/ID a worker.
 *
 * Every element is built with createElement and textContent: names from users (job names,
 * dataset ids, worker addresses, error messages) are never parsed as HTML. The token, when the
 * cluster has one, is asked for once and kept in the tab's session storage; it goes only in the
 * Authorization header of the requests for data, never in a URL. */
'use strict';

(function () {
  const REFRESH_MS = 2000;
  const TOKEN_KEY = 'sluice.token';
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let status = null, history = null, updatedAt = null, timer = null, stopped = false;

  class AuthError extends Error {}

  /* ---- DOM helpers ---------------------------------------------------------------------- */

  /* h('td', {class: 'num'}, 'text', child, ...): strings become text nodes. */
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      const v = attrs[k];
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function link(href, text) {
    return h('a', {href: href}, text);
  }

  function $(id) {
    return document.getElementById(id);
  }

  /* ---- formatting ----------------------------------------------------------------------- */

  function num(v) {
    return typeof v === 'number' ? v.toLocaleString('en-US') : '-';
  }

  function rate(v) {
    if (typeof v !== 'number') return '-';
    if (v >= 1e6) return (v / 1e6).toFixed(2) + 'M';
    if (v >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    return v.toFixed(1);
  }

  /* Bytes per second with a unit that keeps small rates readable. */
  function bytesRate(v) {
    if (typeof v !== 'number') return '-';
    if (v >= 1e9) return (v / 1e9).toFixed(2) + ' GB/s';
    if (v >= 1e6) return (v / 1e6).toFixed(2) + ' MB/s';
    if (v >= 1e3) return (v / 1e3).toFixed(1) + ' kB/s';
    return v.toFixed(0) + ' B/s';
  }

  /* A chart axis's number: short, no decimals where they add nothing. */
  function axis(v) {
    if (v >= 1e6) return +(v / 1e6).toFixed(1) + 'M';
    if (v >= 1e3) return +(v / 1e3).toFixed(1) + 'k';
    return +v.toFixed(1) + '';
  }

  function mb(v) {
    return typeof v === 'number' ? (v / 1e6).toFixed(2) : '-';
  }

  function duration(s) {
    if (!isFinite(s) || s < 0) return '-';
    s = Math.round(s);
    if (s < 60) return s + ' s';
    if (s < 600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 3600) return Math.round(s / 60) + ' min';
    return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  }

  function badge(text) {
    return h('span', {class: 'badge ' + text}, text);
  }

  function jobState(j) {
    return j.error ? 'failed' : (j.state || '-');
  }

  function jobName(j) {
    return j.name === null || j.name === undefined || j.name === '' ? '(anonymous)' : j.name;
  }

  /* ---- data ----------------------------------------------------------------------------- */

  async function get(path) {
    const headers = token ? {Authorization: 'Bearer ' + token} : {};
    const r = await fetch(path, {headers: headers, cache: 'no-store', credentials: 'omit'});
    if (r.status === 401) throw new AuthError('the dispatcher wants a token');
    if (!r.ok) throw new Error('GET ' + path + ': ' + r.status + ' ' + r.statusText);
    return r.json();
  }

  /* The job's and worker's samples of the history, as chart points [secondsAgo, value]. */
  function seriesOf(kind, id, field, scale) {
    if (!history) return [];
    const out = [];
    for (const s of history.samples) {
      const list = kind === 'total' ? [s] : (s[kind] || []).filter(p => p.id === id);
      if (list.length) out.push([s.age_ms / 1000, (list[0][field] || 0) / (scale || 1)]);
    }
    return out;
  }

  /* Seconds until a distributed job's splits are all finished, from how fast they finished over
   * the last minute of samples; NaN when unknown. */
  function eta(j) {
    const sp = j.splits;
    if (!sp || typeof sp.total !== 'number' || !history) return NaN;
    const pts = history.samples.map(s => [s.age_ms, (s.jobs || []).find(p => p.id === j.id)])
                               .filter(p => p[1] && p[0] <= 60000);
    if (pts.length < 2) return NaN;
    const first = pts[0], last = pts[pts.length - 1];
    const done = last[1].splits_finished - first[1].splits_finished;
    const secs = (first[0] - last[0]) / 1000;
    if (done <= 0 || secs <= 0) return NaN;
    return (sp.total - sp.finished) / (done / secs);
  }

  function progress(j) {
    const sp = j.splits;
    if (!sp) return j.state === 'finished' ? 'done' : '-';
    if (typeof sp.total !== 'number') return 'endless';
    const share = sp.total ? sp.finished / sp.total : 1;
    const left = eta(j);
    return h('span', {class: 'progress-cell'},
             h('span', {class: 'progress', title: sp.finished + ' of ' + sp.total + ' splits'},
               h('span', {style: null, 'data-share': share.toFixed(3)})),
             sp.finished + '/' + sp.total,
             isNaN(left) ? '' : ' · ETA ' + duration(left));
  }

  /* ---- views ---------------------------------------------------------------------------- */

  function card(label, value, id) {
    return h('div', {class: 'card'}, h('div', {class: 'label'}, label),
             h('div', {class: 'value', id: id}, value));
  }

  function charts(list) {
    const box = h('div', {class: 'charts'});
    for (const c of list) {
      const slot = h('div');
      box.appendChild(slot);
      window.sluiceChart.draw(slot, c);
    }
    return box;
  }

  function span() {
    return history ? history.span_ms / 1000 : 900;
  }

  /* draining; late when its last heartbeat is over three intervals old; else serving. */
  function workerState(w) {
    if (w.draining) return 'draining';
    const hb = status && status.config ? status.config.worker_heartbeat_ms : 0;
    if (hb && typeof w.heartbeat_age_ms === 'number' && w.heartbeat_age_ms > 3 * hb) return 'late';
    return 'serving';
  }

  function workerRow(w) {
    return h('tr', {'data-worker-id': w.id},
             h('td', {}, link('#/worker/' + w.id, String(w.id))),
             h('td', {class: 'address'}, w.address),
             h('td', {}, badge(workerState(w))),
             h('td', {class: 'num'}, (w.tasks || []).length),
             h('td', {class: 'num'}, rate(w.elements_per_second)),
             h('td', {class: 'num'}, mb(w.bytes_per_second)),
             h('td', {class: 'num'}, num(w.buffered)),
             h('td', {class: 'num'},
               typeof w.heartbeat_age_ms === 'number' ? w.heartbeat_age_ms + ' ms' : '-'));
  }

  function workersTable(workers) {
    return h('table', {id: 'workers'},
             h('thead', {}, h('tr', {}, h('th', {}, 'ID'), h('th', {}, 'Address'),
                              h('th', {}, 'State'), h('th', {class: 'num'}, 'Tasks'),
                              h('th', {class: 'num'}, 'Elements/s'), h('th', {class: 'num'}, 'MB/s'),
                              h('th', {class: 'num'}, 'Buffered'),
                              h('th', {class: 'num'}, 'Heartbeat'))),
             h('tbody', {}, workers.map(workerRow)));
  }

  function jobRow(j) {
    return h('tr', {'data-job-id': j.id},
             h('td', {}, link('#/job/' + j.id, String(j.id))),
             h('td', {class: 'name'}, jobName(j)),
             h('td', {class: 'dataset'}, j.dataset_id || j.dataset || '-'),
             h('td', {}, j.mode || '-'),
             h('td', {class: 'state'}, badge(jobState(j))),
             h('td', {class: 'num'}, num(j.clients)),
             h('td', {class: 'num'}, num(j.workers)),
             h('td', {}, progress(j)),
             h('td', {class: 'num elements', 'data-value': j.elements}, num(j.elements)),
             h('td', {class: 'num'}, rate(j.elements_per_second)),
             h('td', {class: 'num'}, mb(j.bytes_per_second)));
  }

  function jobsTable(jobs) {
    return h('table', {id: 'jobs'},
             h('thead', {}, h('tr', {}, h('th', {}, 'ID'), h('th', {}, 'Name'),
                              h('th', {}, 'Dataset'), h('th', {}, 'Mode'), h('th', {}, 'State'),
                              h('th', {class: 'num'}, 'Readers'), h('th', {class: 'num'}, 'Workers'),
                              h('th', {}, 'Progress'), h('th', {class: 'num'}, 'Elements'),
                              h('th', {class: 'num'}, 'Elements/s'), h('th', {class: 'num'}, 'MB/s'))),
             h('tbody', {}, jobs.map(jobRow)));
  }

  function failures(jobs) {
    const failed = jobs.filter(j => j.error);
    if (!failed.length) return null;
    return [h('h2', {}, 'Failures'),
            h('ul', {class: 'failures', id: 'failures'},
              failed.map(j => h('li', {'data-job-id': j.id},
                                link('#/job/' + j.id, 'job ' + j.id), ' ',
                                h('span', {class: 'name'}, jobName(j)), ': ',
                                h('span', {class: 'message'}, j.error))))];
  }

  function overview(st) {
    const workers = st.workers || [], jobs = st.jobs || [];
    const states = {serving: 0, draining: 0, late: 0};
    for (const w of workers) states[workerState(w)]++;
    const byState = ['draining', 'late'].filter(k => states[k]).map(k => states[k] + ' ' + k);
    const active = jobs.filter(j => j.state === 'active' && !j.error).length;
    const eps = jobs.reduce((a, j) => a + (j.elements_per_second || 0), 0);
    const bps = jobs.reduce((a, j) => a + (j.bytes_per_second || 0), 0);
    return [
      h('h1', {}, 'Cluster'),
      h('div', {class: 'cards'},
        card('Workers', workers.length + (byState.length ? ' (' + byState.join(', ') + ')' : ''),
             'workers-count'),
        card('Recommended workers', num(st.recommended_workers)),
        card('Active jobs', active + ' of ' + jobs.length, 'jobs-count'),
        card('Datasets', (st.datasets || []).length),
        card('Elements/s', rate(eps)), card('MB/s', mb(bps))),
      charts([{title: 'Elements/s served', span: span(), format: axis,
               series: [{name: 'elements/s', points: seriesOf('total', 0, 'elements_per_second')}]},
              {title: 'Bytes/s served', span: span(), format: bytesRate,
               series: [{name: 'bytes/s', points: seriesOf('total', 0, 'bytes_per_second')}]}]),
      h('h2', {}, 'Workers'),
      workers.length ? workersTable(workers) : h('p', {class: 'muted'}, 'No workers registered.'),
      h('h2', {}, 'Jobs'),
      jobs.length ? jobsTable(jobs) : h('p', {class: 'muted'}, 'No jobs.'),
      failures(jobs)];
  }

  function facts(pairs) {
    return h('dl', {class: 'facts'}, pairs.map(p => [h('dt', {}, p[0]), h('dd', {class: p[2]}, p[1])]));
  }

  function jobPage(st, id) {
    const j = (st.jobs || []).find(x => x.id === id);
    if (!j) return [h('h1', {}, 'Job ' + id), h('p', {class: 'muted'}, 'No such job (collected?).')];
    const sp = j.splits;
    return [
      h('h1', {id: 'job-page'}, 'Job ' + j.id + ' ', h('span', {class: 'name'}, jobName(j))),
      j.error ? h('p', {class: 'error', id: 'job-error'}, 'Failed: ', h('span', {class: 'message'}, j.error))
              : null,
      facts([['State', badge(jobState(j))], ['Dataset', j.dataset_id || j.dataset || '-'],
             ['Mode', j.mode || '-'], ['Iteration', num(j.iteration_id)],
             ['Repetition', num(j.repetition)], ['Readers', num(j.clients)],
             ['Workers', num(j.workers)], ['Elements served', num(j.elements), 'elements'],
             ['MB served', mb(j.bytes)], ['Elements/s', rate(j.elements_per_second)],
             ['MB/s', mb(j.bytes_per_second)],
             ['Splits', sp ? (sp.finished + ' finished, ' + sp.leased + ' leased, ' + sp.returned +
                              ' returned of ' + (sp.total === null ? 'endless' : sp.total)) : '-'],
             ['Progress', progress(j)]]),
      charts([{title: 'Elements/s', span: span(), format: axis,
               series: [{name: 'elements/s', points: seriesOf('jobs', j.id, 'elements_per_second')}]},
              {title: 'Bytes/s', span: span(), format: bytesRate,
               series: [{name: 'bytes/s', points: seriesOf('jobs', j.id, 'bytes_per_second')}]}]),
      h('h2', {}, 'Tasks'),
      h('table', {id: 'job-tasks'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'Worker'), h('th', {}, 'Finished'))),
        h('tbody', {}, (j.tasks || []).map(t => {
          const w = (st.workers || []).find(x => x.address === t.worker);
          return h('tr', {}, h('td', {}, String(t.id)),
                   h('td', {}, w ? link('#/worker/' + w.id, t.worker) : t.worker),
                   h('td', {}, t.finished ? 'yes' : 'no'));
        })))];
  }

  function workerPage(st, id) {
    const w = (st.workers || []).find(x => x.id === id);
    if (!w) return [h('h1', {}, 'Worker ' + id), h('p', {class: 'muted'}, 'No such worker (removed?).')];
    const taskJob = new Map();
    for (const j of st.jobs || [])
      for (const t of j.tasks || []) taskJob.set(t.id, [j, t]);
    return [
      h('h1', {id: 'worker-page'}, 'Worker ' + w.id + ' ', h('span', {class: 'address'}, w.address)),
      facts([['State', badge(workerState(w))], ['Address', w.address, 'address'],
             ['Incarnation', w.incarnation], ['Host', w.host_id || '-'],
             ['Heartbeat age', typeof w.heartbeat_age_ms === 'number' ? w.heartbeat_age_ms + ' ms' : '-'],
             ['Buffered', num(w.buffered) + ' elements, ' + mb(w.buffered_bytes) + ' MB'],
             ['Elements served', num(w.elements)], ['Elements/s', rate(w.elements_per_second)],
             ['MB/s', mb(w.bytes_per_second)]]),
      charts([{title: 'Elements/s served', span: span(), format: axis,
               series: [{name: 'elements/s',
                         points: seriesOf('worker_rates', w.id, 'elements_per_second')}]},
              {title: 'Bytes/s served', span: span(), format: bytesRate,
               series: [{name: 'bytes/s', points: seriesOf('worker_rates', w.id, 'bytes_per_second')}]}]),
      h('h2', {}, 'Tasks'),
      h('table', {id: 'worker-tasks'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'Job'), h('th', {}, 'Name'),
                         h('th', {}, 'Mode'), h('th', {}, 'Finished'))),
        h('tbody', {}, (w.tasks || []).map(tid => {
          const jt = taskJob.get(tid);
          const j = jt ? jt[0] : null;
          return h('tr', {'data-task-id': tid}, h('td', {}, String(tid)),
                   h('td', {}, j ? link('#/job/' + j.id, String(j.id)) : '-'),
                   h('td', {class: 'name'}, j ? jobName(j) : '-'), h('td', {}, j ? j.mode : '-'),
                   h('td', {}, jt ? (jt[1].finished ? 'yes' : 'no') : '-'));
        })))];
  }

  function route() {
    const m = /^#\/(job|worker)\/(\d+)$/.exec(location.hash);
    return m ? {kind: m[1], id: Number(m[2])} : {kind: 'overview'};
  }

  function render() {
    if (!status) return;
    const r = route();
    const crumbs = $('crumbs');
    crumbs.replaceChildren(link('#/', 'Overview'),
                           r.kind === 'overview' ? '' : ' / ' + r.kind + ' ' + r.id);
    const view = r.kind === 'job' ? jobPage(status, r.id)
               : r.kind === 'worker' ? workerPage(status, r.id) : overview(status);
    $('view').replaceChildren(...view.flat().filter(x => x));
    for (const bar of document.querySelectorAll('.progress > span[data-share]'))
      bar.style.width = (100 * Number(bar.getAttribute('data-share'))) + '%';
    $('updated').textContent = updatedAt ? 'updated ' + updatedAt.toLocaleTimeString() : '';
    document.body.setAttribute('data-view', r.kind);
  }

  /* ---- the loop ------------------------------------------------------------------------- */

  function showLogin(refused) {
    stopped = true;
    clearTimeout(timer);
    $('view').replaceChildren();
    $('login').hidden = false;
    $('logout').hidden = true;
    const e = $('login-error');
    e.hidden = !refused;
    e.textContent = refused ? 'The dispatcher refused that token.' : '';
    $('token').focus();
  }

  async function refresh() {
    try {
      const [st, hist] = await Promise.all([get('/api/status'), get('/api/history')]);
      status = st;
      history = hist;
      updatedAt = new Date();
      $('error').hidden = true;
      $('login').hidden = true;
      $('logout').hidden = !token;
      render();
    } catch (e) {
      if (e instanceof AuthError) {
        showLogin(token !== '');
        return;
      }
      $('error').hidden = false;
      $('error').textContent = 'Cannot reach the dispatcher: ' + e.message + ' (retrying)';
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  function start() {
    stopped = false;
    clearTimeout(timer);
    refresh();
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', ev => {
      ev.preventDefault();
      token = $('token').value.trim();
      $('token').value = '';
      sessionStorage.setItem(TOKEN_KEY, token);
      $('login').hidden = true;
      start();
    });
    $('logout').addEventListener('click', () => {
      token = '';
      sessionStorage.removeItem(TOKEN_KEY);
      status = history = null;
      showLogin(false);
    });
    window.addEventListener('hashchange', render);
    start();
  });
})();
