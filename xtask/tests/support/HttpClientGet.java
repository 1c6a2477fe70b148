// `java HttpClientGet.java URL...`: Java's own HTTP client as an application uses it, with
// its defaults (version HTTP_2: on an http:// address its first request offers
// `Upgrade: h2c`). For each URL, two GETs, each by a new client (so each offers the
// upgrade again); per GET one line `URL<TAB>status<TAB>version<TAB>body` or
// `URL<TAB>error<TAB>exception`. Exit status 1 if any GET failed.

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class HttpClientGet {
    public static void main(String[] args) {
        boolean failed = false;
        for (String url : args) {
            for (int i = 0; i < 2; i++) {
                try {
                    HttpClient client = HttpClient.newBuilder()
                            .connectTimeout(Duration.ofSeconds(10))
                            .build();
                    HttpRequest request = HttpRequest.newBuilder(URI.create(url))
                            .timeout(Duration.ofSeconds(30))
                            .build();
                    HttpResponse<String> response =
                            client.send(request, HttpResponse.BodyHandlers.ofString());
                    System.out.println(url + "\t" + response.statusCode() + "\t"
                            + response.version() + "\t" + response.body().strip());
                } catch (Exception e) {
                    failed = true;
                    System.out.println(url + "\terror\t" + e);
                }
            }
        }
        System.exit(failed ? 1 : 0);
    }
}
