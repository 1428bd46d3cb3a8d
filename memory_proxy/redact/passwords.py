"""Passwords, PINs and passphrases stated in English, German, French, Spanish, Italian or Polish, by a grammar
of those languages ("wifi password is X", "password: X", "changed my password to X", "Passwort lautet X",
"mot de passe : X", "mi contraseña es X", "la mia password è X", "hasło to X", "I use X as my password").

Only the value goes. A stop-list per language ("is required", "ist zu kurz", "est trop court"), lower-case
-ed/-ing words after "is" ("is expiring") and French participles ("est bloqué") keep ordinary sentences
intact. Three or more plain words to the end of the clause, none a grammar or stop word, are a passphrase and
go whole ("my password is correct horse battery staple": a stop word may lead). Where the word is often not
about passwords ("pass", Spanish "clave") the value must look like one (6+ characters with a digit, a symbol
or an inner capital: "my bus pass is valid" stays); so must the password of a user/password pair ("login
alice / hunter2": letters and a digit or symbol). Passphrases and seed phrases lose the rest of the clause.
Other languages: memory_proxy/redact/nearby.py, by the words of maintained translations.
"""

from __future__ import annotations

import re

from .rule import NOT_REDACTED, QUOTED, TARGET, Rule, target

# Not a credential when it is the first word after "password is" ("the password is required", "ist falsch",
# "est trop court", "jest za krótkie").
_STOP = (r"(?:(?i:a|an|the|not|no|also|my|your|his|her|their|our|its|this|that|same|different|kept|written"
         r"|set|reset|wrong|incorrect|correct|weak|strong|secure|long|short|too|very|easy|hard|simple|complex"
         r"|unknown|hidden|in|on|at|under|with|from|for|of|to|by|and|or|empty|blank|case|be|it|one|now|still"
         r"|nicht|kein|zu|falsch|richtig|sicher|unsicher|schwach|stark|leer|abgelaufen|geheim|ein|eine"
         r"|der|die|das|mein|meine|dein|sehr|auch|noch|jetzt|immer|gleich|lang|kurz|seit|mit|ohne|bei|für"
         r"|von|auf|im|am|gültig|ungültig|gesperrt|geändert|gespeichert"
         r"|trop|pas|faux|vide|le|la|les|un|une|mon|ma|ton|très|aussi|toujours|maintenant|sur|dans|même"
         r"|depuis|avec|pour|chez|en|valide|invalide"
         r"|demasiado|muy|el|mi|tu|incorrecta|correcta|segura|débil|vacía|también|olvidada|caducada|igual"
         r"|ahora|desde|con|sin|para|hasta|válida|inválida|errónea|misma"
         r"|troppo|non|il|lo|mia|tua|sbagliata|corretta|scaduta|scaduto|molto|anche|vuota|debole|dimenticata"
         r"|sul|uguale|ora|ancora|stata|stato|bloccata|cambiata|valida|errata"
         r"|za|nie|zbyt|złe|błędne|poprawne|bardzo|też|moje|twoje|puste|słabe|krótkie|długie|takie"
         r"|nieprawidłowe|prawidłowe|ważne|nieważne|zmienione|zablokowane))\b")
# Grammar words: a run of words without any, after "password is", is a passphrase, not a sentence.
_FUNC = (r"(?i:a|an|the|and|or|but|nor|so|yet|for|to|of|in|on|at|by|with|from|into|than|then|as|is|are"
         r"|was|were|be|been|am|do|does|did|has|have|had|can|will|would|should|must|not|no|too|very|also"
         r"|just|only|still|now|again|already|always|never|ever|soon|today|yesterday|really|quite|rather"
         r"|pretty|since|because|until|while|when|where|which|who|that|this|these|those|it|its|my|your|his"
         r"|her|our|their|me|him|us|them|i|you|he|she|we|they|same|something|anything|nothing|everything"
         r"|else|here|there|all|any|some|each|every|more|most|less|much|many|enough|if"
         r"|und|oder|aber|mit|seit|mehr|der|die|das|den|dem|ein|eine|et|ou|mais|avec|depuis|plus|le|la|les"
         r"|un|une|du|des|que|qui|y|o|pero|con|desde|el|los|las|del|al|e|ma|più|da|il|lo|che|di|ale|lub"
         r"|już|dla|że)\b")
_PHRASE_WORD = r"(?!" + _FUNC + r"|" + _STOP + r")[A-Za-z]+"
_PHRASE = (  # 3+ plain words to the clause's end, maybe after a stop word ("correct horse battery staple"); the
    # clause's end looked for first, cheaply, before the words are checked one by one against the stop lists
    r"(?=[A-Za-z ]{5,160}(?:[.,;:!?)\n]|$))(?P<p>(?:(?!" + _FUNC + r")[A-Za-z]+ +)?" + _PHRASE_WORD + r"(?: +" + _PHRASE_WORD
    + r"){2,6})(?=[ \t]*(?:[.,;:!?)\n]|$))")
_WORD = r"[^\s\"'`]*[^\s\"'`.,;:)]"  # one token, trailing sentence punctuation left out
STRONG = (r"(?=[^\s\"'`]{6})"  # 6+ characters with a digit, a symbol or a capital inside: "Hunter22!x"
           r"(?=[^\s\"'`]*(?:[\d!@#$%^&*+=~_]|[^\s\"'`][A-Z]))")
_SEP = (r"(?:(?:\s*(?::=|[:=])\s*|\s+(?:is|was)(?:\s+(?:now|still))?(?:\s*:)?\s+)"
        r"(?![a-z]+(?:ed|ing)\b)"  # then not a lower-case -ed/-ing word: "was leaked", "is expiring"
        r"|\s+(?:ist|lautet|war|est|était|c'est|es|era|è|e'|é)"  # de, fr, es, it
        r"(?:\s+(?:jetzt|noch|maintenant|toujours|ahora|ora|ancora))?(?:\s*:)?\s+"
        r"(?![a-zàâçéèêîôû]+é(?:es?|s)?\b)"  # then not a French participle: "est bloqué"
        r"|\s+(?:(?:is|was|got)\s+)?(?:set|changed|reset|updated)\s+to\s+"  # "was changed to"
        r"|\s+to\s+(?=\S*[^\sa-z.,;:!?]))")  # "set my password to X": X needs a digit, capital or symbol
_TARGET_PL = target("to")  # Polish "to" is "is": "hasło to X"
_SEP_PL = r"(?:\s*[:=]\s*|\s+(?:to|jest|brzmi)(?:\s*:)?\s+)"  # Polish: "hasło to X"
PASSWORD = r"(?i:pass(?:word|wort|wd|code)|pwd?|kennwort|mot de passe|mdp|contrase[ñn]a|has[łl][oa])\b"
PASSWORD_TRIGGERS = ("pass", "pw", "kennwort", "mdp", "mot de passe", "contrase", "hasł", "hasl")
_PASSWORD_VALUE = (  # after a weak word (group "weak"): no passphrase, and a bare value must look like one
    NOT_REDACTED + r"(?:(?(weak)(?!)|" + _PHRASE + r")|(?!" + _STOP + r")(?:" + QUOTED + r"|(?P<v>(?(weak)"
    + STRONG + r")" + _WORD + r")))")
_AS_PASSWORD = re.compile(  # the gate of "I use X as my password" (on the lower-cased text)
    r" (?:as|als|comme|como|come|jako) (?:\S+ ){0,2}?(?:pass|pw|kennwort|mot de passe|mdp|contrase|has[łl])")

# Patterns begin with a literal or a small character class and check word boundaries only after it
# (a lookbehind): that lets the regex engine skip ahead, which is most of the speed.
RULES = [
    Rule("pin", ("pin", "geheimzahl"), re.compile(
        r"[pPzZ](?i:(?<!\wp)(?<=p)in(?:[\s-]+(?:code|number|nummer))?|(?<=geheimz)ahl)" + TARGET
        + r"(?:\s*[:=]\s*|\s+(?:is|was|ist|lautet|war|est|es|era|è|to|jest)\s+)(?P<v>\d{4,8})\b"), "v"),
    Rule("passphrase", ("phrase", "mnemonic", "frase", "fraza"), re.compile(  # the rest of the clause goes
        r"(?:(?i:pass\s?phrase|seed[\s-]?phrase|recovery\s+phrase|mnemonic|wiederherstellungsphrase"
        r"|phrase\s+(?:secr[eè]te|de\s+(?:passe|r[ée]cup[ée]ration))|frase\s+(?:semilla|de\s+recuperaci[oó]n"
        r"|segreta|di\s+recupero))" + TARGET + _SEP
        + r"|(?i:fraza\s+(?:odzyskiwania|seed))" + _TARGET_PL + _SEP_PL + r")"
        + NOT_REDACTED + r"(?!" + _STOP + r")(?:" + QUOTED + r"|(?P<v>[^\s.,;:\"'`][^.,;\n\"'`]*))")),
    # "password is X", "Passwort: X", "la mia password è X"; weak: "my gmail pass is X"
    Rule("password", ("pass", "pw"), re.compile(
        r"[pP](?<![^\W\d_][pP])(?i:ass(?:word|wort|wd|code|(?<![\w-]pass)(?P<weak>))|wd?)\b"
        + TARGET + _SEP + _PASSWORD_VALUE)),
    # "Kennwort: X", "mot de passe : X", "mi contraseña es X", "hasło to X"; weak: "la clave del wifi es X"
    Rule("password", ("kennwort", "mdp", "mot de passe", "contrase", "clave", "hasł", "hasl"), re.compile(
        r"[kKmMcChH](?<![^\W\d_].)(?:(?i:(?<=k)ennwort|(?<=m)dp|(?<=m)ot de passe|(?<=c)ontrase[ñn]a"
        r"|(?<=c)lave(?P<weak>))\b" + TARGET + _SEP + r"|(?i:(?<=h)as[łl]o)\b" + _TARGET_PL + _SEP_PL + r")"
        + _PASSWORD_VALUE)),
    Rule("password", PASSWORD_TRIGGERS, re.compile(  # "I use X as my password", "uso X como contraseña"
        r"[uUcCpPbBvVnN](?<![^\W\d_].)(?i:(?<=u)s(?:e[ds]?|ing|o)|(?<=u)tili(?:se|zo|zzo)|(?<=u)żywam"
        r"|(?<=c)hose|(?<=p)icked|(?<=b)enutze|(?<=v)erwende|(?<=n)utze)\s+" + NOT_REDACTED
        + r"(?!" + _STOP + r"|" + _FUNC + r")(?:" + QUOTED + r"|(?P<v>" + _WORD + r"))"
        + r" (?i:as|als|comme|como|come|jako) (?:[\w'-]+ ){0,2}?" + PASSWORD
        + r"(?![\s-]*(?i:manager|generator|hint|reset|policy|vault|safe))"),
          gate=lambda low: _AS_PASSWORD.search(low) is not None),
    Rule("password", ("login", "cred"), re.compile(  # "login alice / hunter2", "creds: admin:Adm1n!"
        r"[gGcC](?i:(?<=\blog)in|(?<!\wc)(?<=c)red(?:s|entials?|enciales|enziali))\b(?:\s+is)?(?:\s*:)?\s+"
        r"[^\s/:,]+\s*[/:]\s*" + NOT_REDACTED + r"(?!/)(?P<v>(?=[^\s\"'`]*[A-Za-z])"
        r"(?=[^\s\"'`]*[\d!@#$%^&*+=~_])" + _WORD + r")"),
          "v"),
]
