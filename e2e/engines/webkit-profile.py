#!/usr/bin/python3
# WebKitGTK with a persistent profile and Safari's storage features on (OPFS, its sync access
# handles and writable streams, the Storage API), driven line by line from stdin: what the
# engine suite's WebDriver route cannot give (WebKitWebDriver's automation sessions are
# ephemeral and refuse OPFS). Run under xvfb-run by e2e/engines/webkit-profile.ts, with Debian's
# python3-gi and gir1.2-webkit2-4.1 (scripts/setup.sh installs them).
#
#   webkit-profile.py PROFILE_DIR
#
# Each line in is a JSON command with an "id"; each line out answers one:
#   {"id", "load": url}               loads url; answers once it has loaded (or failed)
#   {"id", "eval": body, "arg": x}    runs `body` as an async function of `arg` in the page
#                                     (with a user gesture, as WebKit's API runs script)
#   {"id", "files": [paths]}          the files the next file chooser the page opens picks
#   {"id", "quit": true}              ends
# Answers: {"id", "ok": value} or {"id", "error": message}. Nothing else is written to stdout.
import json
import sys

import gi

gi.require_version('Gtk', '3.0')
gi.require_version('WebKit2', '4.1')
from gi.repository import GLib, Gtk, WebKit2  # noqa: E402

# Safari's storage features, off by default in WebKitGTK 2.50
FEATURES = {'FileSystem', 'AccessHandle', 'FileSystemWritableStream', 'StorageAPI', 'StorageAPIEstimate'}

profile = sys.argv[1]
manager = WebKit2.WebsiteDataManager(base_data_directory=f'{profile}/data', base_cache_directory=f'{profile}/cache')
context = WebKit2.WebContext(website_data_manager=manager)
settings = WebKit2.Settings()
features = WebKit2.Settings.get_all_features()
enabled = []
for i in range(features.get_length()):
    f = features.get(i)
    if f.get_identifier() in FEATURES:
        settings.set_feature_enabled(f, True)
        enabled.append(f.get_identifier())
missing = FEATURES - set(enabled)
if missing:
    sys.stderr.write(f'webkit-profile: this WebKitGTK lacks the features {sorted(missing)}\n')
    sys.exit(2)
settings.set_enable_developer_extras(True)
view = WebKit2.WebView(web_context=context, settings=settings)
window = Gtk.Window()
window.set_default_size(1280, 800)
window.add(view)
window.show_all()

picked = []
loading = []


def answer(i, **kw):
    sys.stdout.write(json.dumps({'id': i, **kw}) + '\n')
    sys.stdout.flush()


def on_file_chooser(_view, request):
    if not picked:
        request.cancel()
    else:
        request.select_files(picked[:])
        picked.clear()
    return True


def on_load(_view, event):
    if event == WebKit2.LoadEvent.FINISHED:
        while loading:
            answer(loading.pop(0))


def on_load_failed(_view, _event, uri, error):
    while loading:
        answer(loading.pop(0), error=f'{uri}: {error.message}')
    return False


view.connect('run-file-chooser', on_file_chooser)
view.connect('load-changed', on_load)
view.connect('load-failed', on_load_failed)


def evaluated(i):
    def done(v, res):
        try:
            value = v.call_async_javascript_function_finish(res)
            answer(i, ok=json.loads(value.to_json(0) or 'null'))
        except GLib.Error as e:
            answer(i, error=e.message)

    return done


def command(c):
    i = c['id']
    if 'load' in c:
        loading.append(i)
        view.load_uri(c['load'])
    elif 'eval' in c:
        args = GLib.Variant('a{sv}', {'arg': GLib.Variant('s', json.dumps(c.get('arg')))})
        # esbuild (tsx) names functions with a `__name` helper the page lacks
        body = f'const __name = (f) => f; return await ({c["eval"]})(JSON.parse(arg));'
        view.call_async_javascript_function(body, -1, args, None, None, None, evaluated(i))
    elif 'files' in c:
        picked[:] = c['files']
        answer(i, ok=None)
    elif 'quit' in c:
        answer(i, ok=None)
        Gtk.main_quit()


def on_stdin(channel, condition):
    if condition & GLib.IO_IN:
        line = channel.readline()
        if line:
            c = json.loads(line)
            try:
                command(c)
            except Exception as e:  # a bad command: answered so, and the driver goes on
                answer(c.get('id'), error=f'webkit-profile: {e}')
            return True
    Gtk.main_quit()
    return False


stdin = GLib.IOChannel.unix_new(sys.stdin.fileno())
GLib.io_add_watch(stdin, GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, on_stdin)
sys.stdout.write(json.dumps({'ready': f'{WebKit2.get_major_version()}.{WebKit2.get_minor_version()}.{WebKit2.get_micro_version()}', 'features': enabled}) + '\n')
sys.stdout.flush()
Gtk.main()
