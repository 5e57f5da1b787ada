"""The site's Home and Getting started pages show the install commands and runnable code.

Both come from README.md's `## Install and run` section (hooks.home_page,
hooks.quick_start); test_site.py checks the built pages, these the Markdown the
hooks make, without a build.
"""

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("hooks", ROOT / ".ci" / "docs" / "hooks.py")
hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hooks)

README = """# pkg

Intro.

## Install and run

```bash
pip install pkg
```

```python
import pkg
### not a heading: inside a fence
```

### Later

Details.

## Usage

More.
"""


def test_home_page_is_the_intro_and_the_quick_start():
    intro, sections = hooks.readme_sections(README)
    home = hooks.home_page(intro, sections)
    assert home.startswith("# pkg\n\nIntro.")
    assert "pip install pkg" in home and "import pkg\n### not a heading" in home
    assert "Details." not in home and "More." not in home


def test_home_page_without_a_getting_started_section_is_the_whole_readme():
    intro, sections = hooks.readme_sections(README.replace("## Install and run", "## Setup"))
    home = hooks.home_page(intro, sections)
    assert "pip install pkg" in home and "Details." in home and "More." in home


def first_python_block(text):
    return re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)


def test_readme_home_page_has_install_and_python_example():
    readme = (ROOT / "README.md").read_text()
    intro, sections = hooks.readme_sections(readme)
    home = hooks.home_page(intro, sections)
    getting_started = dict(sections)[hooks.GETTING_STARTED]
    example = first_python_block(readme)
    assert "model.fit(" in example and "tfp_bnn.predict." in example
    for page in (home, getting_started):
        assert re.search(r"^pip install ", page, re.M)
        assert first_python_block(page) == example
